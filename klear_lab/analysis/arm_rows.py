"""One row of a reproduction's ``arms`` table: a paper arm's scores and deltas beside a sweep arm's.

The paper's columns are per benchmark (``paper AIME 2024``, ``paper Δ AIME 2024``); ours are the objective's
mean ± std (n) across seeds with its Welch t interval against the baseline arm, and the same per benchmark the
sweep entry maps to a metric (``reproduce.py`` explains the comparison).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from klear_lab.analysis.spec import Analysis
from klear_lab.stats import welch_interval


def arm_row(analysis: Analysis, arm: str | None, label: str | None, values: dict[str, np.ndarray],
            per_bench: dict[str, dict[str, np.ndarray]], base: str) -> dict[str, Any]:
    """The row of paper arm ``arm`` (None: a sweep arm the paper lacks) matched to sweep arm ``label`` (None: not
    in the sweep); ``values``: each sweep arm's objective per seed, ``per_bench``: the same per mapped benchmark."""
    row: dict[str, Any] = {"arm": arm or label, "sweep arm": label or "", "in paper": arm is not None}
    for i, bench in enumerate(analysis.benchmarks):
        paper = analysis.paper[arm][i] if arm else math.nan
        row[f"paper {bench}"] = paper
        row[f"paper Δ {bench}"] = paper - analysis.paper[analysis.baseline][i] if arm else math.nan
    row.update(ours(values, label, base))
    row["baseline"] = arm == analysis.baseline
    for bench, bench_values in per_bench.items():
        row.update(ours(bench_values, label, base, bench))
    return row


def ours(values: dict[str, np.ndarray], label: str | None, base: str, bench: str = "") -> dict[str, Any]:
    """Our mean ± std (n) of sweep arm ``label`` and its Δ vs the baseline arm ``base``: the objective's
    columns (``ours mean``, ``n``, ``ours Δ``, ...) or a benchmark's (``ours AIME 2024 mean``,
    ``ours AIME 2024 n``, ``ours Δ AIME 2024``, ...)."""
    tag = f" {bench}" if bench else ""
    mine = values.get(label or "", np.array([]))
    d, lo, hi = welch_interval(mine, values[base])
    if label == base:  # 0 by definition; an interval of the baseline against itself means nothing
        lo = hi = math.nan
    return {f"ours{tag} mean": float(mine.mean()) if len(mine) else math.nan,
            f"ours{tag} std": float(mine.std(ddof=1)) if len(mine) > 1 else math.nan,
            f"ours{tag} n" if bench else "n": len(mine),
            f"ours Δ{tag}": d, f"ours Δ{tag} ci low": lo, f"ours Δ{tag} ci high": hi}
