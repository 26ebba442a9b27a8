"""``deltas.png``: our bars on the report's scale, no exact-looking bar for one seed, no 0 bar for an arm not run."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from sweep_fixtures import write_spec

from klear_lab.analysis.figure import draw_deltas, our_bars, plot_deltas
from klear_lab.analysis.report import interval, ours_scale
from klear_lab.analysis.reproduce import reproduce
from klear_lab.analysis.spec import load_analysis
from klear_lab.sweep.compare import TrialRecord
from klear_lab.sweep.spec import load_spec

# percentages, as the paper prints them: ours (val/acc, a fraction) is drawn x100
PAPER = {"0.001": [40.0, 30.0], "0.002": [37.0, 31.0], "0.004": [30.0, 28.0]}


@pytest.fixture
def rep(tmp_path):
    """Sweep toy (lr 0.001-0.003) stands for paper arms 0.001 and 0.002; 0.004 only in sweep other."""
    toy = write_spec(tmp_path, seeds=(0, 1))
    other = write_spec(tmp_path, name="other", lrs=(0.001, 0.004), seeds=(0, 1))
    body = {"title": "Toy table", "source": "hand-made", "benchmarks": ["A", "B"], "paper": PAPER,
            "baseline": "0.001", "claims": [], "sweeps": [toy.name, other.name]}
    path = tmp_path / "toy_analysis.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    analysis = load_analysis(path)
    ref = analysis.sweeps[0]
    values = {"lr=0.001": [0.60, 0.62], "lr=0.002": [0.50], "lr=0.003": [0.70, 0.74]}  # lr=0.002: one seed
    records = [TrialRecord(arm, seed, "COMPLETE", {"val/acc": v}) for arm, vals in values.items()
               for seed, v in enumerate(vals)]
    return reproduce(analysis, ref, load_spec(ref.spec_path), records)


def test_our_bars_are_on_the_papers_scale_and_leave_out_arms_not_run(rep):
    assert ours_scale(rep, "val/acc") == 100.0
    bars = our_bars(rep)
    assert bars.arms == ["0.001", "0.002", "lr=0.003"] and bars.not_run == ["0.004"]  # no 0 bar for 0.004
    assert bars.in_paper == [True, True, False]
    np.testing.assert_allclose(bars.delta, [0.0, -11.0, 11.0])  # percentage points, not -0.11 / +0.11
    row = rep.arms.set_index("arm").loc["lr=0.003"]
    half = (row["ours Δ ci high"] - row["ours Δ ci low"]) / 2 * 100
    np.testing.assert_allclose(bars.err, [[0.0, 0.0, half], [0.0, 0.0, half]])
    assert interval(row, 100.0).startswith("+11 [")  # the report's number for the same bar
    assert list(bars.no_ci) == [False, True, False]
    assert bars.notes == ["baseline\nn=2", "n=1\nno CI", "n=2"]


def test_the_figure_draws_those_values(rep, tmp_path):
    import matplotlib.pyplot as plt

    fig = draw_deltas(rep)
    try:
        paper, ours = fig.axes
        heights = [p.get_height() for p in ours.patches]
        np.testing.assert_allclose(heights, [0.0, -11.0, 11.0])
        assert [bool(p.get_hatch()) for p in ours.patches] == [False, True, False]  # one seed: hatched
        assert "percentage points" in ours.get_ylabel() and "percentage points" in ours.get_title()
        assert "0.004" in ours.get_xlabel()
        assert [t.get_text() for t in ours.get_xticklabels()] == ["0.001", "0.002", "lr=0.003"]
        assert [t.get_text() for t in paper.get_xticklabels()] == ["0.001", "0.002", "0.004"]
        a_bars = paper.patches[:3]  # benchmark A, one bar per paper arm
        assert [p.get_height() for p in a_bars] == [0.0, -3.0, -10.0]
    finally:
        plt.close(fig)
    plot_deltas(rep, tmp_path / "deltas.png")
    assert (tmp_path / "deltas.png").read_bytes()[:4] == b"\x89PNG"


def test_an_arm_without_results_has_no_bar(rep):
    rep.arms.loc[rep.arms["arm"] == "lr=0.003", ["n", "ours Δ", "ours Δ ci low", "ours Δ ci high"]] = (
        0, math.nan, math.nan, math.nan)
    bars = our_bars(rep)
    assert math.isnan(bars.delta[2]) and bars.notes[2] == "n=0\nno result" and not bars.no_ci[2]
