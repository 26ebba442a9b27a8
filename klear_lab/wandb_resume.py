"""The W&B logger of a resumed run: W&B ends up with every step once, whatever the stop cost it.

A resumed run continues in the same W&B run id, in a new ``offline-run-*`` directory (W&B cannot
resume an offline run; ``wandb sync`` uploads a run's directories one after the other into one run).
Two things would go wrong without this logger:

- the steps between the checkpoint and the stop are logged again: W&B, which plots against
  ``trainer/global_step``, would hold them twice;
- a ``kill -9`` (a preemption) loses what W&B had not yet written to its run file: its service
  buffers the file, and a run killed 25 steps in left a file with no history at all (measured).

So the logger reads what the earlier attempts' run files hold (:mod:`klear_lab.wandb_file`), logs first
the rows of ``csv/metrics.csv`` (up to the checkpoint) that W&B lacks, and then leaves out, step by
step and metric by metric, what W&B already has. A resumed run repeats the replayed steps exactly
(same weights, data position and RNG), so the values W&B keeps for them are the run's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import WandbLogger

from klear_lab import wandb_file
from klear_lab.tracking import row_metrics

STEP = "trainer/global_step"  # Lightning's WandbLogger logs each row's step under this key


class ResumedWandbLogger(WandbLogger):
    """Lightning's WandbLogger, leaving out the metrics ``logged`` holds for a step (``{step: {key, ...}}``)."""

    def __init__(self, *args: Any, logged: dict[int, set[str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.logged = logged

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        done = self.logged.get(step) if step is not None else None
        if done:
            metrics = {k: v for k, v in metrics.items() if k not in done}
            if not metrics:
                return
        super().log_metrics(metrics, step)

    def backfill(self, rows: list[dict[str, str]]) -> None:
        """Log the metrics of the CSV ``rows`` that W&B lacks (:meth:`log_metrics` leaves out the rest)."""
        for row in rows:
            step, metrics = row_metrics(row)
            if step is not None and metrics:
                self.log_metrics(metrics, step)
                self.logged.setdefault(step, set()).update(metrics)


def logged_in_wandb(run_dir: Path) -> dict[int, set[str]]:
    """``{step: metric keys}`` in the history of the W&B run files of ``run_dir`` (its earlier attempts)."""
    logged: dict[int, set[str]] = {}
    for path in sorted((run_dir / "wandb").glob("*run-*/run-*.wandb")):
        for row in wandb_file.history(path):
            if isinstance(row.get(STEP), (int, float)):
                keys = {k for k in row if not k.startswith("_") and k != STEP}
                logged.setdefault(int(row[STEP]), set()).update(keys)
    return logged

