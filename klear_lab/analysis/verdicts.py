"""A verdict on each of the paper's claims: "better beats than" on a metric, in that metric's direction.

A claim "A beats B" on a metric where higher is better (lower: a drawdown) is

- ``reproduced`` when our Welch t 95 % interval for A - B lies entirely above 0 (below, for lower),
- ``contradicted`` when it lies entirely on the other side,
- ``inconclusive`` otherwise, saying which way the means lean.

Both arms need at least two completed seeds for an interval; with two, only a difference several
times the seed-to-seed spread is decisive (t = 12.7 at one degree of freedom).

A claim without ``benchmark:`` is judged on the sweep's objective (its overall verdict, in the objective's
direction) and on each mapped benchmark the paper prints a number for (one row per benchmark); a claim
naming a ``benchmark:`` is judged on that benchmark's metric alone, in the direction its sweep entry gives
(``higher`` unless ``direction: lower``), for its overall verdict and its one benchmark row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from klear_lab.analysis.spec import Analysis, Claim, SweepRef
from klear_lab.stats import welch_interval

MIN_SEEDS_FOR_VERDICT = 2


@dataclass
class Measure:
    """What a claim is judged on: a metric, which way is better on it (``maximize``/``minimize``), each sweep
    arm's values of it (one per completed seed) and, per paper arm without one, why."""

    metric: str
    direction: str
    values: dict[str, np.ndarray]
    why: dict[str, str]

    @property
    def better(self) -> str:
        """``higher`` or ``lower``, as the claims tables say it."""
        return "lower" if self.direction == "minimize" else "higher"


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


def claim_name(claim: Claim) -> str:
    return claim.text or f"{claim.better} beats {claim.than}"


def printed(analysis: Analysis, bench: str) -> bool:
    """Whether the paper prints a number for ``bench`` in some arm (a column of nulls: a directional claim's)."""
    i = analysis.benchmarks.index(bench)
    return any(not math.isnan(values[i]) for values in analysis.paper.values())


def judged_benchmarks(analysis: Analysis, claim: Claim, mapped: dict[str, Measure]) -> list[str]:
    """The mapped benchmarks ``claim`` gets a row for: the one it names alone, else each the paper prints a
    number for (a column of nulls is no score of the paper's, so a claim "A beats B" says nothing there)."""
    if claim.benchmark:
        return [claim.benchmark] if claim.benchmark in mapped else []
    return [bench for bench in mapped if printed(analysis, bench)]


def claim_row(analysis: Analysis, ref: SweepRef, claim: Claim, objective: Measure,
              mapped: dict[str, Measure]) -> dict[str, Any]:
    """The claims table's row: the paper's Δ per benchmark (of the one it names alone, for a claim naming one)
    and ours on the objective, or on the named benchmark's metric."""
    row: dict[str, Any] = {"claim": claim_name(claim), "better": claim.better, "than": claim.than}
    for i, bench in enumerate(analysis.benchmarks):
        on_it = not claim.benchmark or bench == claim.benchmark
        row[f"paper Δ {bench}"] = analysis.paper[claim.better][i] - analysis.paper[claim.than][i] if on_it else math.nan
    if claim.benchmark and claim.benchmark not in mapped:
        return row | _unmapped(analysis, ref, claim)
    measure = mapped[claim.benchmark] if claim.benchmark else objective
    out = row | _compare(ref, claim, measure)
    if claim.benchmark:
        out["verdict"] += _paper_side(row[f"paper Δ {claim.benchmark}"], measure)
    return out | {"metric": measure.metric, "direction": measure.better}  # last: existing columns keep their places


def benchmark_row(analysis: Analysis, ref: SweepRef, claim: Claim, bench: str, measure: Measure) -> dict[str, Any]:
    """The per-benchmark table's row of ``claim`` on ``bench``; a paper Δ on the other side of the claim (a tie,
    or the other way) is said in the verdict."""
    i = analysis.benchmarks.index(bench)
    paper = analysis.paper[claim.better][i] - analysis.paper[claim.than][i]
    row: dict[str, Any] = {"claim": claim_name(claim), "better": claim.better, "than": claim.than,
                           "benchmark": bench, "metric": measure.metric, "paper Δ": paper}
    out = row | _compare(ref, claim, measure)
    out["verdict"] += _paper_side(paper, measure)
    return out | {"direction": measure.better}  # last: existing columns keep their places


def _paper_side(paper: float, measure: Measure) -> str:
    """The verdict's note on a paper Δ on the other side of the claim (a tie, or the other way; none: no number)."""
    if math.isnan(paper) or (paper if measure.direction == "maximize" else -paper) > 0:
        return ""
    return f"; the paper's own Δ here is {paper:+g}: not the claim's side"  # Table 5's AIME 2024: 28.33 both


def _compare(ref: SweepRef, claim: Claim, measure: Measure) -> dict[str, Any]:
    """Our Δ of ``claim.better`` - ``claim.than`` with its interval, seed counts and verdict; ``no result``
    says why (``measure.why``: paper arm -> reason it has no value)."""
    better = measure.values.get(ref.label_of.get(claim.better, ""), np.array([]))
    than = measure.values.get(ref.label_of.get(claim.than, ""), np.array([]))
    d, lo, hi = welch_interval(better, than)
    said = verdict(d, lo, hi, measure.direction, len(better), len(than))
    reasons = [measure.why[arm] for arm in (claim.better, claim.than) if arm in measure.why]
    if said == "no result" and reasons:
        said += f" ({'; '.join(reasons)})"
    return {"ours Δ": d, "ours Δ ci low": lo, "ours Δ ci high": hi, "n better": len(better), "n than": len(than),
            "verdict": said}


def _unmapped(analysis: Analysis, ref: SweepRef, claim: Claim) -> dict[str, Any]:
    """A claim naming a benchmark this sweep entry maps to no metric: nothing to judge it on here. A sweep the
    analysis does not list has no entry to edit: it is told to list it (its ``metrics:`` came from another
    entry's, and only those the sweep records)."""
    if any(r is ref for r in analysis.sweeps):
        why = (f"the entry for {ref.spec_path.name} maps no metric to {claim.benchmark!r}: add one to its "
               f"`metrics:` in {analysis.path}")
    else:
        why = (f"{ref.spec_path.name} is not listed in {analysis.path}, and no metric it records is mapped to "
               f"{claim.benchmark!r}: list it under `sweeps:` with `metrics: {{{claim.benchmark}: METRIC}}`")
    return {"ours Δ": math.nan, "ours Δ ci low": math.nan, "ours Δ ci high": math.nan, "n better": 0, "n than": 0,
            "verdict": f"no result ({why})", "metric": "", "direction": ""}
