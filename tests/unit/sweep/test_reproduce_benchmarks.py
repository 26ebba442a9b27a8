"""Paper benchmarks mapped to metrics a sweep logs: per-benchmark deltas, verdicts and ``benchmarks.csv``."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import yaml
from rich.console import Console
from sweep_fixtures import write_spec

from klear_lab.analysis.report import write_reproduction
from klear_lab.analysis.reproduce import reproduce
from klear_lab.analysis.spec import load_analysis
from klear_lab.sweep.compare import TrialRecord
from klear_lab.sweep.spec import load_spec

# The toy sweep's arms are lr=0.001, lr=0.002, lr=0.003 (sweep_fixtures.write_spec).
PAPER = {"0.001": [1.0, 10.0], "0.002": [2.0, 30.0], "0.003": [1.5, None]}
CLAIMS = [{"better": "0.002", "than": "0.001", "text": "more lr helps"}, {"better": "0.001", "than": "0.003"}]
# Per trial: (arm, seed, val/acc, val/a/acc, val/b/acc). The objective is too noisy to decide either
# claim; benchmark A decides both the paper's way, benchmark B goes against "more lr helps" and
# lr=0.003 has one value of it (its seed 1 did not log val/b/acc).
TRIALS = [("lr=0.001", 0, 0.10, 0.10, 0.50), ("lr=0.001", 1, 0.20, 0.11, 0.51),
          ("lr=0.002", 0, 0.12, 0.30, 0.20), ("lr=0.002", 1, 0.22, 0.31, 0.21),
          ("lr=0.003", 0, 0.05, 0.05, 0.40), ("lr=0.003", 1, 0.06, 0.06, None)]
T_2DF = 4.302653  # t(0.975, df = 2): Welch's df with two seeds of equal spread in each arm
HALF = T_2DF * math.sqrt(0.00005 / 2 + 0.00005 / 2)  # two arms, each seeds x and x + 0.01


def trial_records() -> list[TrialRecord]:
    out = []
    for arm, seed, acc, a, b in TRIALS:
        metrics = {"val/acc": acc, "val/a/acc": a} | ({"val/b/acc": b} if b is not None else {})
        out.append(TrialRecord(arm, seed, "COMPLETE", metrics))
    return out


def reproduction(tmp: Path, metrics: dict[str, str] | None, direction: str = "maximize"):
    """The toy analysis on hand-made trials; ``metrics`` is its sweep entry's benchmark map."""
    spec = write_spec(tmp, seeds=(0, 1), metrics=["train/loss", "val/a/acc", "val/b/acc"],
                      objective={"metric": "val/acc", "direction": direction})
    entry = {"spec": spec.name, "metrics": metrics} if metrics is not None else spec.name
    body = {"title": "Toy table", "benchmarks": ["A", "B"], "paper": PAPER, "baseline": "0.001",
            "claims": CLAIMS, "sweeps": [entry]}
    path = tmp / "toy_analysis.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    analysis = load_analysis(path)
    return reproduce(analysis, analysis.sweeps[0], load_spec(spec), trial_records())


def test_each_mapped_benchmark_gets_its_own_delta_and_verdict(tmp_path):
    rep = reproduction(tmp_path, {"B": "val/b/acc", "A": "val/a/acc"})
    assert rep.metrics == {"A": "val/a/acc", "B": "val/b/acc"}       # the analysis's benchmark order
    # the objective, as without a map: neither claim decided
    assert rep.claims["verdict"].tolist() == ["inconclusive (leans the paper's way)"] * 2
    rows = rep.benchmarks
    assert list(zip(rows["claim"], rows["benchmark"], rows["metric"], strict=True)) == [
        ("more lr helps", "A", "val/a/acc"), ("more lr helps", "B", "val/b/acc"),
        ("0.001 beats 0.003", "A", "val/a/acc"), ("0.001 beats 0.003", "B", "val/b/acc")]
    assert rows["verdict"].tolist() == [  # on A the paper itself has 0.003 ahead (1.5 vs 1.0): said so
        "reproduced", "contradicted", "reproduced; the paper's own Δ here is -0.5: not the claim's side",
        "inconclusive (leans the paper's way; under 2 seeds per arm)"]
    assert rows["ours Δ"].tolist() == pytest.approx([0.20, -0.30, 0.05, 0.505 - 0.40])
    assert rows["ours Δ ci low"].iloc[0] == pytest.approx(0.20 - HALF, rel=1e-5)
    assert rows["ours Δ ci high"].iloc[1] == pytest.approx(-0.30 + HALF, rel=1e-5)
    assert math.isnan(rows["ours Δ ci low"].iloc[3])                   # one seed of lr=0.003: no interval
    assert rows["n better"].tolist() == [2, 2, 2, 2] and rows["n than"].tolist() == [2, 2, 2, 1]
    assert rows["paper Δ"].iloc[:3].tolist() == [1.0, 20.0, -0.5] and math.isnan(rows["paper Δ"].iloc[3])


def test_benchmark_verdicts_read_higher_as_better_when_the_objective_minimizes(tmp_path):
    """A benchmark stands for a paper score: a sweep minimizing its objective turned them round."""
    rep = reproduction(tmp_path, {"A": "val/a/acc", "B": "val/b/acc"}, direction="minimize")
    assert rep.claims["verdict"].tolist() == ["inconclusive (leans the other way)"] * 2  # the objective's way
    assert [v.split(";")[0] for v in rep.benchmarks["verdict"].tolist()[:3]] == ["reproduced", "contradicted",
                                                                                "reproduced"]


def test_the_baseline_row_has_no_interval_against_itself(tmp_path):
    arms = reproduction(tmp_path, {"A": "val/a/acc"}).arms.set_index("arm")
    base = arms.loc["0.001", ["ours Δ ci low", "ours Δ ci high", "ours Δ A ci low", "ours Δ A ci high"]]
    assert base.isna().all() and arms.loc["0.001", "ours Δ"] == 0.0
    assert arms.loc[["0.002", "0.003"], "ours Δ ci low"].notna().all()


def test_arms_get_our_mean_and_delta_per_mapped_benchmark(tmp_path):
    arms = reproduction(tmp_path, {"A": "val/a/acc", "B": "val/b/acc"}).arms.set_index("arm")
    assert arms.loc["0.002", "ours mean"] == pytest.approx(0.17)         # the objective's columns stay
    assert arms.loc["0.002", "ours A mean"] == pytest.approx(0.305)
    assert arms.loc["0.002", "ours A std"] == pytest.approx(0.0070711, rel=1e-4)
    assert arms.loc["0.002", "ours Δ A"] == pytest.approx(0.20)
    assert arms.loc["0.002", "ours Δ A ci high"] == pytest.approx(0.20 + HALF, rel=1e-5)
    assert arms.loc["0.003", "n"] == 2 and arms.loc["0.003", "ours B n"] == 1
    assert arms.loc["0.003", "ours B mean"] == pytest.approx(0.40) and math.isnan(arms.loc["0.003", "ours B std"])
    assert arms.loc["0.001", "ours Δ B"] == 0.0


def test_an_unmapped_benchmark_stays_on_the_objective(tmp_path):
    rep = reproduction(tmp_path, {"B": "val/acc"})                       # the objective is a metric it records
    assert rep.benchmarks["benchmark"].tolist() == ["B", "B"]
    assert rep.benchmarks["verdict"].tolist() == rep.claims["verdict"].tolist()
    assert "ours B mean" in rep.arms and "ours A mean" not in rep.arms
    assert reproduction(tmp_path, None).benchmarks.empty


def test_benchmarks_csv_report_and_console(tmp_path):
    out = tmp_path / "out_dir"
    console = Console(record=True, width=400, force_terminal=True, color_system="standard")
    write_reproduction(reproduction(tmp_path, {"A": "val/a/acc", "B": "val/b/acc"}), out, console)
    table = pd.read_csv(out / "benchmarks.csv")
    assert table[["claim", "benchmark", "metric", "verdict"]].values.tolist() == [
        ["more lr helps", "A", "val/a/acc", "reproduced"], ["more lr helps", "B", "val/b/acc", "contradicted"],
        ["0.001 beats 0.003", "A", "val/a/acc", "reproduced; the paper's own Δ here is -0.5: not the claim's side"],
        ["0.001 beats 0.003", "B", "val/b/acc", "inconclusive (leans the paper's way; under 2 seeds per arm)"]]
    assert {"ours A mean", "ours B mean"} <= set(pd.read_csv(out / "arms.csv").columns)
    report = (out / "report.md").read_text()
    assert "## The paper's claims per benchmark" in report and "A: `val/a/acc`, B: `val/b/acc`" in report
    # ours on the paper's scale: it prints percentages, ours are fractions
    assert f"| more lr helps | B | val/b/acc (%) | +20.00 | -30 [{-30 - 100 * HALF:+.3g}, {-30 + 100 * HALF:+.3g}] " \
           "| 2/2 | contradicted |" in report
    lines = [line for line in console.export_text(styles=True, clear=False).splitlines() if "val/b/acc" in line]
    assert "\x1b[31m" in lines[0] and "contradicted" in lines[0]        # red
    assert "[no interval]" in lines[1] and "\x1b[3" not in lines[1]    # escaped, and no verdict colour
    printed = console.export_text()
    assert "the paper's claims per benchmark" in printed and str(out / "benchmarks.csv") in printed

    # a later run that maps no benchmark leaves no benchmarks.csv from the earlier one
    console = Console(record=True, width=400)
    write_reproduction(reproduction(tmp_path, None), out, console)
    assert not (out / "benchmarks.csv").exists() and (out / "claims.csv").is_file()
    assert "per benchmark" not in (out / "report.md").read_text()
    assert "ours A mean" not in pd.read_csv(out / "arms.csv").columns
    printed = console.export_text()
    assert "per benchmark" not in printed and "benchmarks.csv" not in printed


def test_a_sweep_launched_from_another_checkout_keeps_its_benchmark_map(tmp_path):
    """Its sweep.json names a spec path this checkout lacks: the entry of the same sweep name is taken, not
    the first with the same arm labels (Table 6's embedded sweep, which maps no benchmark)."""
    from klear_lab.analysis import _ref_for

    root = Path(__file__).resolve().parents[3]
    analysis = load_analysis(root / "analysis/table6_alpha.yaml")
    paper = load_spec(root / "sweeps/paper/table6_alpha.yaml")
    embedded = load_spec(root / "sweeps/rl_alpha.yaml")
    assert [r.labels for r in analysis.sweeps][0] == [r.labels for r in analysis.sweeps][1]  # labels alone: ambiguous
    ref = _ref_for(analysis, paper, tmp_path / "elsewhere/sweeps/paper/table6_alpha.yaml")
    assert ref.metrics == {"AIME 2024 avg@32": "val/aime24/acc", "AIME 2025 avg@32": "val/aime25/acc"}
    assert _ref_for(analysis, embedded, tmp_path / "elsewhere/sweeps/rl_alpha.yaml") is analysis.sweeps[0]
