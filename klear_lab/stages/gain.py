"""Did RL help? Start vs final held-out accuracy with a paired bootstrap interval on the gain.

Both evaluations score the same problems (each problem's score: 0/1 greedy, or the fraction of its
``eval.samples`` that pass), so a paired bootstrap over problems gives the gain's 95 % interval.
"""

from __future__ import annotations

import math
import random


def paired_bootstrap(before: list[float], after: list[float], n_boot: int = 2000, seed: int = 0,
                     ) -> tuple[float, float]:
    """95 % interval of mean(after) - mean(before), resampling problems with replacement; NaN bounds
    under 2 problems (one problem resampled is itself: no interval)."""
    n = len(before)
    if len(after) != n:
        raise ValueError(f"paired scores need the same problems: {n} before, {len(after)} after")
    if n < 2:
        return math.nan, math.nan
    diffs = [float(a) - float(b) for a, b in zip(after, before, strict=True)]
    rng = random.Random(seed)
    stats = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(n_boot))
    return stats[int(0.025 * n_boot)], stats[int(0.975 * n_boot) - 1]


LAST_EVALS = 5
"""Figure 2's summary of a curve: the mean of its last 5 evaluations (paper.md §4.3)."""


def gain_summary(evals: list) -> dict[str, float]:
    """``val/acc_start``, ``val/acc_final``, ``val/gain`` (+ CI), ``val/n`` from (step, EvalResult) pairs, and
    the training curve's best, last-5 mean and largest fall (``val/acc_best``, ``val/acc_last5``,
    ``val/acc_drawdown``; the evaluations after the start, as the paper's curves begin at a training
    step), each source's too when there are several (``val/<source>/acc_best``...)."""
    if len(evals) < 2:
        return {}
    (_, first), (_, last) = evals[0], evals[-1]
    lo, hi = paired_bootstrap(first.scores, last.scores)
    acc0 = sum(first.scores) / len(first.scores)
    acc1 = sum(last.scores) / len(last.scores)
    out = {"val/acc_start": acc0, "val/acc_final": acc1, "val/gain": acc1 - acc0,
           "val/gain_ci95_low": lo, "val/gain_ci95_high": hi, "val/n": float(len(first.scores))}
    curves = [r.metrics("val") for _, r in evals[1:]]  # [training evaluations] of their metrics
    sources = sorted({rec.source for rec in last.records})
    for prefix in ["val", *(f"val/{s}" for s in sources if len(sources) > 1)]:
        accs = [m[f"{prefix}/acc"] for m in curves]
        out[f"{prefix}/acc_best"] = max(accs)
        out[f"{prefix}/acc_last{LAST_EVALS}"] = sum(accs[-LAST_EVALS:]) / len(accs[-LAST_EVALS:])
        out[f"{prefix}/acc_drawdown"] = drawdown(accs)
    return out


def drawdown(curve: list[float]) -> float:
    """The largest fall of an accuracy curve below its best earlier evaluation (0 for a curve that never
    falls): how Figure 2's "GPPO is more stable than CISPO" can be read off runs, lower is steadier."""
    best, worst_fall = -math.inf, 0.0
    for acc in curve:
        best = max(best, acc)
        worst_fall = max(worst_fall, best - acc)
    return worst_fall
