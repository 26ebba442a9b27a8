"""The step an evaluation's row is logged at: the number of updates done when it ran.

A training row sits at Lightning's 0-based index of its update (update k at k - 1: the updates
done before it, so the weights its loss and rollouts came from). Lightning logged an evaluation
inside ``fit`` at that same index but the final one (after ``fit``) at k, and the starting point
at 0: the start and the evaluation after update 1 shared step 0 (``rl.eval_every=1``: a curve lost
its start), and evaluations every 2 of 5 steps landed at 1, 3 and 5 (the final one) instead of 2,
4 and 5. Logged at the updates done, an evaluation's row is the row of the weights it scored, like
a training row: the start at 0, the one after update k at k.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported by resume checks that run before (or without) Lightning
    import lightning as L

STEP_KEY = "step"  # a metric of this name is the row's step to Lightning's logger connector (and not logged)


def log_at_updates_done(module: L.LightningModule, updates: int, sync_dist: bool) -> None:
    """Have the evaluation metrics ``module`` logs in this validation epoch written at step ``updates``."""
    module.log(STEP_KEY, float(updates), sync_dist=sync_dist)


def is_evaluation_row(row: dict[str, str]) -> bool:
    """A ``metrics.csv`` row holding an evaluation's metrics only (``val/*``)."""
    return any(v != "" for k, v in row.items() if k.startswith("val/")) and all(
        v == "" for k, v in row.items() if k != STEP_KEY and not k.startswith("val/"))
