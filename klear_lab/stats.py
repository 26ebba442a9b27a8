"""Intervals for a difference of means across seeds, without scipy: Welch's t and the percentile bootstrap.

Why Welch's and not only the bootstrap: with 2 seeds per arm its 95 % interval is
just [min(a) - max(b), max(a) - min(b)], which excludes 0 in about 1 of 3 comparisons of two arms
that do not differ at all. Welch's interval widens with few seeds (t = 12.7 at 1 degree of
freedom), so a verdict needs a difference that the seeds actually support.
"""

from __future__ import annotations

import math

import numpy as np

TIE_TOLERANCE = 1e-6  # relative to the means: float32-logged equal means differ by ~1e-8
MAX_P = 0.9995  # the fixed-step integration below is accurate to ~1e-5 up to here (df >= 1)
N_BOOT = 10_000


def t_quantile(p: float, df: float) -> float:
    """Quantile of Student's t with ``df`` (> 0, finite, may be fractional) degrees of freedom,
    for 0.5 < p <= 0.9995 (intervals up to 99.9 %)."""
    if not 0.5 < p <= MAX_P or not (df > 0 and math.isfinite(df)):
        raise ValueError(f"need 0.5 < p <= {MAX_P} and a finite df > 0, got p={p}, df={df}")
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(x: float) -> float:  # 0.5 + integral of the density over [0, x] (Simpson, 2,000 panels)
        t = np.linspace(0.0, x, 4001)
        f = np.exp(log_norm - (df + 1) / 2 * np.log1p(t * t / df))
        return 0.5 + (x / 12000) * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def welch_interval(a: np.ndarray, b: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """mean(a) - mean(b) and its Welch t interval.

    The bounds are NaN when either arm has under 2 finite values, or when no arm varies across
    seeds (no spread to size an interval with: a zero-width interval would call any difference).
    """
    a, b = _finite(a), _finite(b)
    if not len(a) or not len(b):
        return math.nan, math.nan, math.nan
    means = float(a.mean()), float(b.mean())
    d = mean_difference(a, b)
    if len(a) < 2 or len(b) < 2:
        return d, math.nan, math.nan
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    if negligible(se, *means):
        return d, math.nan, math.nan
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = t_quantile(0.5 + level / 2, df) * se
    return d, d - half, d + half


def bootstrap_diff(arm: np.ndarray, base: np.ndarray, n_boot: int = N_BOOT, seed: int = 0,
                   ) -> tuple[float, float, float]:
    """mean(arm) - mean(base) and its percentile-bootstrap 95 % interval.

    No interval (NaN bounds) unless both arms have 2 values or more: resampling one value gives back
    that value, so the interval would be as narrow as the other arm's spread (zero with one seed each).
    None either when neither arm varies: its zero width would call any difference, as in Welch's.
    """
    diff = mean_difference(arm, base)  # a float32 tie is 0, as in Welch's and the star's
    if len(arm) < 2 or len(base) < 2 or not (spread(arm) or spread(base)):
        return diff, math.nan, math.nan
    rng = np.random.default_rng(seed)
    a = rng.choice(arm, size=(n_boot, len(arm)), replace=True).mean(axis=1)
    b = rng.choice(base, size=(n_boot, len(base)), replace=True).mean(axis=1)
    lo, hi = np.percentile(a - b, [2.5, 97.5])
    return diff, float(lo), float(hi)


def spread(values: np.ndarray) -> bool:
    """Whether ``values`` differ by more than float32 logging noise."""
    return not negligible(float(values.max() - values.min()), float(values.min()), float(values.max()))


def mean_difference(a: np.ndarray, b: np.ndarray) -> float:
    """mean(a) - mean(b), with float32 logging noise (:func:`negligible`) read as a tie: 0."""
    means = float(np.mean(a)), float(np.mean(b))
    return 0.0 if negligible(means[0] - means[1], *means) else means[0] - means[1]


def negligible(x: float, *scales: float) -> bool:
    """Whether ``x`` is float32 logging noise next to the largest of ``scales`` (means of the same
    metric): two equal accuracies averaged in another order differ by ~1e-8."""
    return abs(x) <= TIE_TOLERANCE * max(*(abs(s) for s in scales), 1e-12)


def _finite(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=float)
    return values[np.isfinite(values)]
