"""A mapped metric's direction (``{metric: M, direction: lower}``) and claims on one benchmark: Figure 2's "GPPO is
more stable than CISPO" is judged on a drawdown, where lower is better, and the paper prints no number for it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from sweep_fixtures import write_spec

from klear_lab.analysis.report import to_markdown, write_reproduction
from klear_lab.analysis.reproduce import reproduce
from klear_lab.analysis.spec import load_analysis
from klear_lab.analysis.summary import summary_markdown
from klear_lab.errors import ConfigError
from klear_lab.sweep.compare import TrialRecord
from klear_lab.sweep.spec import load_spec

# The toy sweep's arms are lr=0.001, lr=0.002, lr=0.003 (sweep_fixtures.write_spec). Benchmark F is a fall (a
# drawdown): the paper prints no number for it, only that more lr is steadier.
PAPER = {"0.001": [1.0, None], "0.002": [2.0, None], "0.003": [1.5, None]}
HELPS = {"better": "0.002", "than": "0.001", "text": "more lr helps"}
STEADIER = {"better": "0.002", "than": "0.001", "benchmark": "F", "text": "more lr is steadier"}
FALL = {"metric": "val/f", "direction": "lower"}
# Per trial: (arm, seed, val/acc, val/a/acc, val/f). The objective is too noisy to decide; on A lr=0.002 is
# 0.20 above lr=0.001, and its fall 0.20 smaller.
TRIALS = [("lr=0.001", 0, 0.10, 0.10, 0.30), ("lr=0.001", 1, 0.20, 0.11, 0.31),
          ("lr=0.002", 0, 0.12, 0.30, 0.10), ("lr=0.002", 1, 0.22, 0.31, 0.11),
          ("lr=0.003", 0, 0.05, 0.05, 0.20), ("lr=0.003", 1, 0.06, 0.06, 0.21)]


def trial_records() -> list[TrialRecord]:
    return [TrialRecord(arm, seed, "COMPLETE", {"val/acc": acc, "val/a/acc": a, "val/f": f})
            for arm, seed, acc, a, f in TRIALS]


def write_analysis(tmp: Path, metrics: dict, claims: list | None = None, extra_sweeps: list | None = None) -> Path:
    spec = write_spec(tmp, seeds=(0, 1), metrics=["val/a/acc", "val/f"])
    body = {"title": "Toy figure", "benchmarks": ["A", "F"], "paper": PAPER, "baseline": "0.001",
            "claims": claims if claims is not None else [HELPS, STEADIER],
            "sweeps": [{"spec": spec.name, "metrics": metrics}, *(extra_sweeps or [])]}
    path = tmp / "toy_analysis.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def reproduction(tmp: Path, metrics: dict, claims: list | None = None, entry: int = 0, extra_sweeps=None):
    analysis = load_analysis(write_analysis(tmp, metrics, claims, extra_sweeps))
    ref = analysis.sweeps[entry]
    return reproduce(analysis, ref, load_spec(ref.spec_path), trial_records())


def test_a_claim_on_a_lower_is_better_benchmark_is_judged_on_its_metric_alone(tmp_path):
    rep = reproduction(tmp_path, {"A": "val/a/acc", "F": FALL})
    claims = rep.claims.set_index("claim")
    steadier = claims.loc["more lr is steadier"]
    assert (steadier["metric"], steadier["direction"]) == ("val/f", "lower")
    assert steadier["ours Δ"] == pytest.approx(-0.20) and steadier["verdict"] == "reproduced"  # a smaller fall
    assert math.isnan(steadier["paper Δ A"]) and math.isnan(steadier["paper Δ F"])  # its own benchmark: no number
    helps = claims.loc["more lr helps"]  # the other claim stays on the objective
    assert (helps["metric"], helps["direction"], helps["paper Δ A"]) == ("val/acc", "higher", 1.0)
    assert helps["verdict"] == "inconclusive (leans the paper's way)"
    # one row each: the general claim not on F (the paper prints no number there), the claim on F on F alone
    assert list(zip(rep.benchmarks["claim"], rep.benchmarks["benchmark"], rep.benchmarks["verdict"], strict=True)) == [
        ("more lr helps", "A", "reproduced"), ("more lr is steadier", "F", "reproduced")]
    assert rep.directions == {"A": "higher", "F": "lower"}


def test_a_lower_direction_turns_the_verdict_and_the_papers_side_round(tmp_path):
    """The same Δ that reproduces "more lr helps" where higher is better contradicts it where lower is; the
    paper's +1 on A is then on the other side of the claim, and said so."""
    rep = reproduction(tmp_path, {"A": {"metric": "val/a/acc", "direction": "lower"}, "F": FALL}, claims=[HELPS])
    assert rep.benchmarks["verdict"].tolist() == ["contradicted; the paper's own Δ here is +1: not the claim's side"]
    assert rep.claims["verdict"].tolist() == ["inconclusive (leans the paper's way)"]  # the objective: maximize
    higher = reproduction(tmp_path, {"A": {"metric": "val/a/acc", "direction": "higher"}, "F": FALL}, claims=[HELPS])
    assert higher.benchmarks["verdict"].tolist() == ["reproduced"]


def test_a_claim_on_one_benchmark_gives_the_papers_side_in_both_tables(tmp_path):
    """Judged on A alone where lower is better, the paper's +1 is on the other side: the claims table says so
    as the per-benchmark table does."""
    on_a = {**HELPS, "benchmark": "A", "text": "more lr lowers A"}
    rep = reproduction(tmp_path, {"A": {"metric": "val/a/acc", "direction": "lower"}, "F": FALL}, claims=[on_a])
    said = "contradicted; the paper's own Δ here is +1: not the claim's side"
    assert rep.claims["verdict"].tolist() == rep.benchmarks["verdict"].tolist() == [said]


def test_the_new_columns_come_last_so_existing_ones_keep_their_places(tmp_path):
    rep = reproduction(tmp_path, {"A": "val/a/acc"}, claims=[HELPS])
    assert list(rep.claims.columns)[-2:] == ["metric", "direction"]
    assert list(rep.claims.columns)[-3] == "verdict"
    assert list(rep.benchmarks.columns)[-1] == "direction"
    assert list(rep.benchmarks.columns)[4:6] == ["metric", "paper Δ"]


def test_reports_say_lower_is_better_and_which_metric_a_claim_is_judged_on(tmp_path):
    rep = reproduction(tmp_path, {"A": "val/a/acc", "F": FALL})
    report = to_markdown(rep)
    assert "| paper's claim | paper Δ A | paper Δ F | metric | ours Δ [95% CI] |" in report
    assert "| more lr is steadier | – | – | val/f (lower is better) | -0.2 [" in report
    assert "| more lr helps | +1.00 | – | val/acc (%) | +2 [" in report  # the unit in the cell, as per benchmark
    assert "A: `val/a/acc`, F: `val/f` (lower is better)" in report
    assert "| 0.002 | lr=0.002 | 2.00 (+1.00) | – | " in report  # a null paper value: no "– (–)"
    assert "| more lr is steadier | F | val/f (lower is better) | – | -0.2 [" in report
    assert "| more lr is steadier, on val/f (lower is better) |" in summary_markdown([rep], [])
    assert "| more lr helps | `toy` |" in summary_markdown([rep], [])  # on the objective: as before
    console = Console(record=True, width=400)
    write_reproduction(rep, tmp_path / "out", console)
    assert "val/f (lower is better)" in console.export_text()


def test_the_figure_leaves_out_a_benchmark_the_paper_prints_no_number_for(tmp_path):
    import matplotlib.pyplot as plt

    from klear_lab.analysis.figure import draw_deltas

    fig = draw_deltas(reproduction(tmp_path, {"A": "val/a/acc", "F": FALL}))
    try:
        paper = fig.axes[0]
        assert [t.get_text() for t in paper.get_legend().get_texts()] == ["A"]  # no empty slot, no legend entry
        assert len(paper.patches) == 3  # one bar per paper arm
    finally:
        plt.close(fig)


def test_without_claims_on_one_benchmark_the_claims_table_keeps_its_columns(tmp_path):
    rep = reproduction(tmp_path, {"A": "val/a/acc"}, claims=[HELPS])
    assert "| paper's claim | paper Δ A | paper Δ F | ours Δ (%) [95% CI] | seeds (better/than) | verdict |" in \
        to_markdown(rep)


def test_a_claim_on_a_benchmark_this_entry_leaves_unmapped_says_so(tmp_path):
    other = write_spec(tmp_path, name="other", seeds=(0, 1), metrics=["val/a/acc"])
    rep = reproduction(tmp_path, {"A": "val/a/acc", "F": FALL}, entry=1,
                       extra_sweeps=[{"spec": other.name, "metrics": {"A": "val/a/acc"}}])
    steadier = rep.claims.set_index("claim").loc["more lr is steadier"]
    assert steadier["verdict"] == (f"no result (the entry for other.yaml maps no metric to 'F': add one to its "
                                   f"`metrics:` in {tmp_path / 'toy_analysis.yaml'})")
    assert rep.benchmarks["claim"].tolist() == ["more lr helps"]
    assert "| more lr is steadier | `other` |" in summary_markdown([rep], [])  # not "…, on –"


def test_a_claim_unmapped_for_an_unlisted_sweep_says_to_list_it(tmp_path):
    """A sweep the analysis does not list (its arms taken from a listed entry) has no entry to add a metric to."""
    from klear_lab.analysis import _ref_for

    analysis = load_analysis(write_analysis(tmp_path, {"A": "val/a/acc", "F": FALL}))
    copy = write_spec(tmp_path, name="copy", lrs=(0.001, 0.002), seeds=(0, 1), metrics=["val/a/acc"])
    spec = load_spec(copy)
    ref = _ref_for(analysis, spec, copy)
    assert all(ref is not listed for listed in analysis.sweeps)
    steadier = reproduce(analysis, ref, spec, trial_records()).claims.set_index("claim").loc["more lr is steadier"]
    assert steadier["verdict"] == (f"no result (copy.yaml is not listed in {tmp_path / 'toy_analysis.yaml'}, and no "
                                   "metric it records is mapped to 'F': list it under `sweeps:` with "
                                   "`metrics: {F: METRIC}`)")


@pytest.mark.parametrize(("metrics", "claims", "message"), [
    ({"F": {"metric": "val/f", "direction": "down"}}, None,
     "sweeps[0].metrics.F.direction: expected higher or lower, got 'down'"),
    ({"F": {"metric": "val/f", "direction": "minimize"}}, None,
     "sweeps[0].metrics.F.direction: expected higher or lower, got 'minimize'"),
    ({"F": {"metric": "val/f", "sense": "lower"}}, None,
     "sweeps[0].metrics.F: expected a metric name or {metric: NAME, direction: higher or lower}"),
    ({"F": {"direction": "lower"}}, None, "sweeps[0].metrics.F: expected a metric name or"),
    ({"F": ["val/f"]}, None, "sweeps[0].metrics.F: expected a metric name or {metric: NAME, direction: higher or "
     "lower}, got ['val/f']"),
    ({"F": None}, None, "sweeps[0].metrics.F: expected a metric name or"),
    ({"A": "val/a/acc"}, [HELPS, STEADIER], "claims[1].benchmark: no sweep entry maps 'F' to a metric"),
    ({"F": FALL}, [HELPS | {"benchmark": "G"}], "claims[0].benchmark: 'G' is not a benchmark of this analysis"),
    ({"F": FALL}, [HELPS | {"on": "F"}], "claims[0]: expected {better: ARM, than: ARM, text: ..., benchmark: "),
])
def test_bad_directions_and_claim_benchmarks_name_file_and_key(tmp_path, metrics, claims, message):
    path = write_analysis(tmp_path, metrics, claims)
    with pytest.raises(ConfigError) as err:
        load_analysis(path)
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value)
