"""A paper table next to a sweep's results, and a verdict on each of the paper's claims.

The paper reports one benchmark score per arm; a sweep reports its objective per trial (several
seeds per arm). Neither scale is the other's, so the comparison is about *differences*: each
arm's delta against the baseline arm, the paper's per benchmark and ours with a Welch t 95 %
interval over seeds (``klear_lab.stats``). A claim "A beats B" is

- ``reproduced`` when our interval for A - B lies entirely on the better side of 0,
- ``contradicted`` when it lies entirely on the worse side,
- ``inconclusive`` otherwise, saying which way the means lean.

Both arms need at least two completed seeds for an interval; with two, only a difference several
times the seed-to-seed spread is decisive (t = 12.7 at one degree of freedom).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from klear_lab.analysis.spec import Analysis, SweepRef
from klear_lab.stats import welch_interval
from klear_lab.sweep.compare import TrialRecord
from klear_lab.sweep.spec import SweepSpec

MIN_SEEDS_FOR_VERDICT = 2


@dataclass
class Reproduction:
    """One analysis evaluated on one sweep's study."""

    analysis: Analysis
    sweep: SweepSpec
    arms: pd.DataFrame
    claims: pd.DataFrame
    n_complete: int
    n_trials: int


def verdict(delta: float, lo: float, hi: float, direction: str, n_better: int, n_than: int) -> str:
    """``reproduced`` / ``contradicted`` / ``inconclusive (...)`` / ``no result`` for "better beats than"."""
    if n_better == 0 or n_than == 0 or math.isnan(delta):
        return "no result"
    sign = 1.0 if direction == "maximize" else -1.0
    if min(n_better, n_than) < MIN_SEEDS_FOR_VERDICT:
        why = f"; under {MIN_SEEDS_FOR_VERDICT} seeds per arm"
    elif math.isnan(lo):
        why = "; no spread across seeds to size an interval"
    else:
        why = ""
        low, high = sorted((sign * lo, sign * hi))
        if low > 0:
            return "reproduced"
        if high < 0:
            return "contradicted"
    lean = sign * delta
    how = "tie" if lean == 0 else "leans the paper's way" if lean > 0 else "leans the other way"
    return f"inconclusive ({how}{why})"


def objective_values(records: list[TrialRecord], label: str, metric: str) -> np.ndarray:
    """The objective of every completed trial of sweep arm ``label``."""
    vals = [r.metrics.get(metric) for r in records if r.arm == label and r.state == "COMPLETE"]
    return np.array([v for v in vals if v is not None and math.isfinite(v)], dtype=float)


def reproduce(analysis: Analysis, ref: SweepRef, spec: SweepSpec, records: list[TrialRecord]) -> Reproduction:
    """Both tables for ``records`` of the sweep ``spec`` (pure: no files, no study)."""
    label_of = ref.label_of
    values = {label: objective_values(records, label, spec.metric) for label in ref.labels}
    base_vals = values[label_of[analysis.baseline]]
    rows = [_arm_row(analysis, arm, label_of.get(arm), values, base_vals) for arm in analysis.paper]
    matched = set(label_of.values())
    rows += [_arm_row(analysis, None, label, values, base_vals) for label in ref.labels if label not in matched]
    claims = []
    for claim in analysis.claims:
        better = values.get(label_of.get(claim.better, ""), np.array([]))
        than = values.get(label_of.get(claim.than, ""), np.array([]))
        d, lo, hi = welch_interval(better, than)
        row: dict[str, Any] = {"claim": claim.text or f"{claim.better} beats {claim.than}",
                               "better": claim.better, "than": claim.than}
        for i, bench in enumerate(analysis.benchmarks):
            row[f"paper Δ {bench}"] = analysis.paper[claim.better][i] - analysis.paper[claim.than][i]
        row.update({"ours Δ": d, "ours Δ ci low": lo, "ours Δ ci high": hi,
                    "n better": len(better), "n than": len(than),
                    "verdict": verdict(d, lo, hi, spec.direction, len(better), len(than))})
        claims.append(row)
    return Reproduction(analysis, spec, pd.DataFrame(rows), pd.DataFrame(claims),
                        n_complete=sum(r.state == "COMPLETE" for r in records), n_trials=len(records))


def _arm_row(analysis: Analysis, arm: str | None, label: str | None, values: dict[str, np.ndarray],
             base_vals: np.ndarray) -> dict[str, Any]:
    row: dict[str, Any] = {"arm": arm or label, "sweep arm": label or "", "in paper": arm is not None}
    for i, bench in enumerate(analysis.benchmarks):
        paper = analysis.paper[arm][i] if arm else math.nan
        row[f"paper {bench}"] = paper
        row[f"paper Δ {bench}"] = paper - analysis.paper[analysis.baseline][i] if arm else math.nan
    mine = values.get(label or "", np.array([]))
    row["ours mean"] = float(mine.mean()) if len(mine) else math.nan
    row["ours std"] = float(mine.std(ddof=1)) if len(mine) > 1 else math.nan
    row["n"] = len(mine)
    d, lo, hi = welch_interval(mine, base_vals)
    row.update({"ours Δ": d, "ours Δ ci low": lo, "ours Δ ci high": hi, "baseline": arm == analysis.baseline})
    return row
