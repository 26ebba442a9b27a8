"""The best arm of a comparison table: starred among arms with a finite objective on every seed.

An arm whose other seeds diverged or failed would be crowned on its lucky seeds; it gets a note under
the table instead (:func:`best_notes`).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from klear_lab.stats import negligible


def star_best(df: pd.DataFrame, objective: str, direction: str) -> None:
    """Set ``best`` (starred) and ``best note`` (why an arm is, or is not, starred).

    The best arm is chosen among arms whose every seed finished with a finite objective: an arm whose
    other seeds diverged or failed would be crowned on its lucky seeds. Such an arm that would have
    beaten the best gets a note instead of the star. When no arm is complete, the best mean over
    finite seeds is starred as before, and its note says so. Arms tied with the best (within float32
    logging noise) are best too.
    """
    means = df[f"{objective} mean"]
    complete = (df[f"{objective} n"] == df["n"]) & (df["failed"] == 0) & means.notna()
    pool = means[complete] if complete.any() else means
    df["best"] = False  # no arm completed: no best (pandas refuses idxmax over all-NaN)
    df["best note"] = ""
    if not pool.notna().any():
        return
    sign = 1 if direction == "maximize" else -1
    best = pool.max() if sign > 0 else pool.min()
    tied = [not math.isnan(m) and negligible(m - best, best) for m in means]
    df["best"] = [t and (c or not complete.any()) for t, c in zip(tied, complete, strict=True)]
    word = "higher" if sign > 0 else "lower"
    for i, row in df.iterrows():
        seeds = f"{row[f'{objective} n']} of {row['n'] + row['failed']} seeds"
        if not complete.any() and row["best"]:
            df.at[i, "best note"] = (f"starred on {seeds}: no arm has a finite {objective} on every seed "
                                     f"({_lost_seeds(row, objective)})")
        elif complete.any() and not complete[i] and sign * (row[f"{objective} mean"] - best) > 0 and not tied[i]:
            df.at[i, "best note"] = f"has a {word} mean on {seeds}; not starred: {_lost_seeds(row, objective)}"


def _lost_seeds(row: Any, objective: str) -> str:
    """``1 seed diverged, 2 seeds failed``: the seeds an arm's mean leaves out (non-finite objective, or failed)."""
    diverged = row["n"] - row[f"{objective} n"]
    parts = [f"{k} seed{'s' if k > 1 else ''} {what}" for k, what in ((diverged, "diverged"), (row["failed"], "failed"))
             if k]
    return ", ".join(parts)


def best_notes(df: pd.DataFrame) -> list[str]:
    """One line per arm with a ``best note`` (see :func:`star_best`), for under the table."""
    if "best note" not in df:
        return []
    return [f"arm {row['arm']} {row['best note']}" for _, row in df.iterrows() if row["best note"]]
