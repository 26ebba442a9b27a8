"""The best arm of a comparison table: starred among arms with a finite objective on every seed.

An arm whose other seeds diverged, failed, were pruned or have not finished would be crowned on its
lucky seeds; it gets a note under
the table instead (:func:`best_notes`).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from klear_lab.stats import negligible


def star_best(df: pd.DataFrame, objective: str, direction: str, seeds: int) -> None:
    """Set ``best`` (starred) and ``best note`` (why an arm is, or is not, starred).

    The best arm is chosen among arms with a finite objective on each of the sweep's ``seeds`` seeds: an
    arm whose other seeds diverged, failed, were pruned or have not finished yet would be crowned on its
    lucky seeds. Such an arm that would have beaten the best gets a note instead of the star. When no
    arm is complete, the best mean over finite seeds is starred as before, and its note says so. Arms
    tied with the best (within float32 logging noise) are best too.
    """
    means = df[f"{objective} mean"]
    complete = (df[f"{objective} n"] >= seeds) & means.notna()
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
        on = f"{row[f'{objective} n']} of {seeds} seeds"
        if not complete.any() and row["best"]:
            df.at[i, "best note"] = (f"starred on {on}: no arm has a finite {objective} on every seed "
                                     f"({_lost_seeds(row, objective, seeds)})")
        elif complete.any() and not complete[i] and sign * (row[f"{objective} mean"] - best) > 0 and not tied[i]:
            df.at[i, "best note"] = f"has a {word} mean on {on}; not starred: {_lost_seeds(row, objective, seeds)}"


def _lost_seeds(row: Any, objective: str, seeds: int) -> str:
    """``1 seed diverged, 2 seeds pruned``: the seeds an arm's mean leaves out (a non-finite objective; failed,
    pruned, or not finished yet)."""
    counts = {"diverged": row["n"] - row[f"{objective} n"], "failed": row["failed"], "pruned": row["pruned"]}
    counts["not finished"] = max(seeds - row["n"] - row["failed"] - row["pruned"], 0)
    return ", ".join(f"{k} seed{'s' if k > 1 else ''} {what}" for what, k in counts.items() if k)


def best_notes(df: pd.DataFrame) -> list[str]:
    """One line per arm with a ``best note`` (see :func:`star_best`), for under the table."""
    if "best note" not in df:
        return []
    return [f"arm {row['arm']} {row['best note']}" for _, row in df.iterrows() if row["best note"]]
