"""Welch's interval behind the reproduction verdicts: t quantiles, degrees of freedom, coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest

from klear_lab.analysis.verdicts import verdict
from klear_lab.stats import t_quantile, welch_interval


@pytest.mark.parametrize(("df", "expected"), [(1, 12.7062), (2, 4.3027), (5, 2.5706), (10, 2.2281), (30, 2.0423),
                                              (1000, 1.9623)])
def test_t_quantiles_match_the_table(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=2e-4)


def test_fractional_df_lies_between_its_neighbours():
    assert t_quantile(0.975, 2) > t_quantile(0.975, 2.5) > t_quantile(0.975, 3)
    assert t_quantile(0.9995, 1) == pytest.approx(636.619, rel=1e-4)       # the largest p it accepts
    for p, df in [(0.4, 3), (0.9999, 1), (0.975, math.inf), (0.975, math.nan), (0.975, 0)]:
        with pytest.raises(ValueError):
            t_quantile(p, df)


def test_welch_by_hand():
    a, b = np.array([1.0, 2.0, 3.0]), np.array([0.0, 0.5])
    va, vb = 1.0 / 3, 0.125 / 2                       # sample variances / n
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 1)
    d, lo, hi = welch_interval(a, b)
    assert d == pytest.approx(1.75)
    assert hi - d == pytest.approx(d - lo) == pytest.approx(t_quantile(0.975, df) * math.sqrt(va + vb))


def test_degenerate_inputs():
    assert all(math.isnan(v) for v in welch_interval(np.array([]), np.array([1.0, 2.0])))
    d, lo, hi = welch_interval(np.array([0.5]), np.array([0.25, 0.35]))
    assert d == pytest.approx(0.2) and math.isnan(lo) and math.isnan(hi)
    # no arm varies across seeds: nothing to size an interval with (a zero width would call anything)
    d, lo, hi = welch_interval(np.array([0.8, 0.8]), np.array([0.7, 0.7]))
    assert d == pytest.approx(0.1) and math.isnan(lo) and math.isnan(hi)
    assert verdict(d, lo, hi, "maximize", 2, 2) == (
        "inconclusive (leans the paper's way; no spread across seeds to size an interval)")
    # float32-logged equal means: a tie, not a difference of 1e-8
    assert welch_interval(np.array([0.85750001, 0.8]), np.array([0.8575, 0.80000001]))[0] == 0.0
    # one arm constant: Welch's df falls back to the other arm's n - 1
    d, lo, hi = welch_interval(np.array([0.8, 0.8, 0.8]), np.array([0.6, 0.7]))
    assert hi - d == pytest.approx(12.7062 * math.sqrt(0.005 / 2), rel=1e-4)
    # infinities are dropped like NaN (a run that diverged), not turned into a NaN interval
    d, lo, hi = welch_interval(np.array([0.9, 0.8, math.inf]), np.array([0.6, 0.7, math.nan]))
    assert d == pytest.approx(0.2) and not math.isnan(lo)
    assert verdict(math.nan, math.nan, math.nan, "maximize", 2, 2) == "no result"


@pytest.mark.parametrize("n", [2, 3, 5])
def test_arms_that_do_not_differ_are_rarely_called(n):
    """Same distribution in both arms: a decisive verdict at most ~5 % of the time (a percentile
    bootstrap at n = 2 calls about one comparison in three)."""
    rng = np.random.default_rng(n)
    decisive = 0
    for _ in range(2000):
        a, b = rng.normal(0.8, 0.03, n), rng.normal(0.8, 0.03, n)
        d, lo, hi = welch_interval(a, b)
        decisive += verdict(d, lo, hi, "maximize", n, n) in ("reproduced", "contradicted")
    assert decisive / 2000 < 0.065


def test_a_real_difference_is_found_with_enough_seeds():
    rng = np.random.default_rng(0)
    a, b = rng.normal(0.85, 0.01, 5), rng.normal(0.80, 0.01, 5)
    assert verdict(*welch_interval(a, b), "maximize", 5, 5) == "reproduced"
    assert verdict(*welch_interval(b, a), "maximize", 5, 5) == "contradicted"
