"""Analysis specs (paper numbers + claims + sweeps) and the reproduction tables, on hand-made trials."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from sweep_fixtures import write_spec

from klear_lab.analysis.reproduce import reproduce
from klear_lab.analysis.spec import load_analysis
from klear_lab.analysis.verdicts import verdict
from klear_lab.errors import ConfigError
from klear_lab.sweep.compare import TrialRecord
from klear_lab.sweep.spec import DEFAULT_RUNNER, load_spec

# The toy sweep's arms are lr=0.001, lr=0.002, lr=0.003 (sweep_fixtures.write_spec).
PAPER = {"0.001": [1.0, 10.0], "0.002": [2.0, 30.0], "0.003": [1.5, None]}


def write_analysis(tmp: Path, **changes) -> Path:
    spec = write_spec(tmp, seeds=(0, 1))
    body = {"title": "Toy table", "source": "hand-made", "benchmarks": ["A", "B"], "paper": PAPER,
            "baseline": "0.001", "claims": [{"better": "0.002", "than": "0.001", "text": "more lr helps"},
                                            {"better": "0.001", "than": "0.003"},
                                            {"better": "0.003", "than": "0.002"}],
            "sweeps": [spec.name]} | changes
    path = tmp / "toy_analysis.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def records(values: dict[str, list[float]]) -> list[TrialRecord]:
    return [TrialRecord(arm, seed, "COMPLETE", {"val/acc": v}) for arm, vals in values.items()
            for seed, v in enumerate(vals)]


@pytest.mark.parametrize(("delta", "lo", "hi", "direction", "n", "expected"), [
    (0.10, 0.05, 0.15, "maximize", 2, "reproduced"),
    (-0.10, -0.15, -0.05, "maximize", 2, "contradicted"),
    (0.10, 0.05, 0.15, "minimize", 2, "contradicted"),       # lower is better: a positive Δ goes against
    (-0.10, -0.15, -0.05, "minimize", 2, "reproduced"),
    (0.02, -0.01, 0.05, "maximize", 3, "inconclusive (leans the paper's way)"),
    (-0.02, -0.05, 0.01, "maximize", 3, "inconclusive (leans the other way)"),
    (0.0, -0.01, 0.01, "maximize", 2, "inconclusive (tie)"),
    (0.10, math.nan, math.nan, "maximize", 1, "inconclusive (leans the paper's way; under 2 seeds per arm)"),
    (-0.02, -0.05, 0.01, "minimize", 3, "inconclusive (leans the paper's way)"),
    (math.nan, math.nan, math.nan, "maximize", 0, "no result"),
])
def test_verdict(delta, lo, hi, direction, n, expected):
    assert verdict(delta, lo, hi, direction, n, n if n else 2) == expected


def test_verdict_needs_two_seeds_in_each_arm():
    assert verdict(0.1, 0.05, 0.15, "maximize", 1, 3) == "inconclusive (leans the paper's way; under 2 seeds per arm)"
    assert verdict(0.1, 0.05, 0.15, "maximize", 3, 2) == "reproduced"


def test_tables_put_paper_and_ours_side_by_side(tmp_path):
    analysis = load_analysis(write_analysis(tmp_path))
    spec = load_spec(analysis.sweeps[0].spec_path)
    ref = analysis.sweeps[0]
    rep = reproduce(analysis, ref, spec, records({"lr=0.001": [0.10, 0.12], "lr=0.002": [0.30, 0.32],
                                                  "lr=0.003": [0.11, 0.13]}))
    arms = rep.arms.set_index("arm")
    assert list(arms.index) == ["0.001", "0.002", "0.003"]
    assert list(arms["sweep arm"]) == ["lr=0.001", "lr=0.002", "lr=0.003"]
    assert arms.loc["0.002", "paper Δ A"] == 1.0 and arms.loc["0.002", "paper Δ B"] == 20.0
    assert math.isnan(arms.loc["0.003", "paper B"])                     # null = not reported
    assert arms.loc["0.002", "ours mean"] == pytest.approx(0.31)
    assert arms.loc["0.002", "ours std"] == pytest.approx(0.0141421, rel=1e-4)
    assert arms.loc["0.002", "ours Δ"] == pytest.approx(0.20)
    half = 4.302653 * math.sqrt(0.0002 / 2 + 0.0002 / 2)                  # Welch: df = 2, t(0.975, 2) = 4.3027
    assert arms.loc["0.002", "ours Δ ci low"] == pytest.approx(0.20 - half, rel=1e-5)
    assert arms.loc["0.002", "ours Δ ci high"] == pytest.approx(0.20 + half, rel=1e-5)
    assert bool(arms.loc["0.001", "baseline"]) and not bool(arms.loc["0.002", "baseline"])
    claims = rep.claims.set_index("claim")
    assert list(claims["verdict"]) == ["reproduced", "inconclusive (leans the other way)", "contradicted"]
    assert claims.loc["more lr helps", "paper Δ A"] == 1.0
    assert claims.loc["0.001 beats 0.003", "ours Δ"] == pytest.approx(-0.01)
    assert rep.n_complete == 6 and rep.n_trials == 6


def test_the_printed_summary_keeps_a_one_seed_claim_s_no_interval(tmp_path):
    """Rich read "[no interval]" as a style tag and printed the delta alone."""
    from rich.console import Console

    from klear_lab.analysis.summary import print_summary

    analysis = load_analysis(write_analysis(tmp_path))
    spec = load_spec(analysis.sweeps[0].spec_path)
    rep = reproduce(analysis, analysis.sweeps[0], spec, records({"lr=0.001": [0.10], "lr=0.002": [0.30],
                                                                  "lr=0.003": [0.11]}))
    console = Console(record=True, width=250)
    print_summary([rep], [], console)
    assert "+20 [no interval] pp" in console.export_text()  # on the paper's percent scale


def test_a_report_says_whether_ours_come_from_a_tiny_model_or_a_checkpoint(tmp_path, repo_root):
    """Ours sat beside the paper's AIME scores, in percent like them, with nothing saying they came from a tiny
    model on the embedded world; the summary called a claim "contradicted" on that basis (a review)."""
    from rich.console import Console

    from klear_lab.analysis.report import to_markdown
    from klear_lab.analysis.scale import scale_of
    from klear_lab.analysis.summary import print_summary, summary_markdown

    path = write_analysis(tmp_path)
    write_spec(tmp_path, seeds=(0, 1), runner=DEFAULT_RUNNER)  # trained by run_experiment: the config's tiny model
    analysis = load_analysis(path)
    spec = load_spec(analysis.sweeps[0].spec_path)
    rep = reproduce(analysis, analysis.sweeps[0], spec, records({"lr=0.001": [0.1, 0.2], "lr=0.002": [0.3, 0.4]}))
    assert rep.scale.short == "tiny model, embedded world"
    assert "- ours: a tiny model built from config, trained on the embedded world" in to_markdown(rep)
    assert "| ours on |" in summary_markdown([rep], []) and "| tiny model, embedded world |" in summary_markdown(
        [rep], [])
    console = Console(record=True, width=250)
    print_summary([rep], [], console)
    assert "tiny model, embedded world" in console.export_text()
    paper = scale_of(load_spec(Path(repo_root) / "sweeps" / "paper" / "table6_alpha.yaml"))
    assert paper.short == "Kwai-Klear/Klear-Reasoner-8B-SFT" and "trained on data/" in paper.line


def test_unmatched_sweep_arms_and_missing_results(tmp_path):
    path = write_analysis(tmp_path, paper={"0.001": [1.0, 1.0], "0.002": [2.0, 2.0]},
                          claims=[{"better": "0.002", "than": "0.001"}])
    analysis = load_analysis(path)
    spec = load_spec(analysis.sweeps[0].spec_path)
    recs = records({"lr=0.001": [0.1, 0.1], "lr=0.003": [0.5]})
    recs.append(TrialRecord("lr=0.002", 0, "FAIL", {}))
    rep = reproduce(analysis, analysis.sweeps[0], spec, recs)
    assert list(rep.arms["arm"]) == ["0.001", "0.002", "lr=0.003"]       # ours-only arm last
    assert list(rep.arms["in paper"]) == [True, True, False]
    assert list(rep.arms["n"]) == [2, 0, 1]
    assert rep.claims["verdict"].tolist() == [
        f"no result (0.002: 0 of 2 seeds completed: run the sweep again: klear-lab sweep {spec.path})"]
    assert rep.n_complete == 3 and rep.n_trials == 6                      # grid points x seeds, not trials


def test_explicit_arm_map(tmp_path):
    spec = write_spec(tmp_path, seeds=(0, 1))
    path = write_analysis(tmp_path, paper={"low": [1.0, 1.0], "high": [2.0, 2.0]}, baseline="low", claims=[],
                          sweeps=[{"spec": spec.name, "arms": {"lr=0.001": "low", "lr=0.003": "high"}}])
    analysis = load_analysis(path)
    rep = reproduce(analysis, analysis.sweeps[0], load_spec(spec), records({"lr=0.001": [0.1], "lr=0.003": [0.3]}))
    assert list(zip(rep.arms["arm"], rep.arms["sweep arm"], strict=True)) == [
        ("low", "lr=0.001"), ("high", "lr=0.003"), ("lr=0.002", "lr=0.002")]


def test_an_explicit_arm_map_beats_a_match_by_name(tmp_path):
    """lr=0.002 matches paper arm 0.002 by name; `arms:` maps lr=0.003 to it instead, and that was refused as
    two sweep arms matching one paper arm."""
    spec = write_spec(tmp_path, seeds=(0, 1))
    path = write_analysis(tmp_path, paper={"0.001": [1.0, 1.0], "0.002": [2.0, 2.0]}, claims=[],
                          sweeps=[{"spec": spec.name, "arms": {"lr=0.003": "0.002"}}])
    ref = load_analysis(path).sweeps[0]
    assert ref.label_of == {"0.001": "lr=0.001", "0.002": "lr=0.003"}


def test_two_explicit_entries_for_one_paper_arm_are_named_as_such(tmp_path):
    """Both matches were already `arms:` entries, and the error still advised mapping one with `arms:`."""
    path = write_analysis(tmp_path, sweeps=[{"spec": "toy.yaml", "arms": {"lr=0.002": "0.001", "lr=0.003": "0.001"}}])
    with pytest.raises(ConfigError) as err:
        load_analysis(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: sweeps[0].arms: entries 'lr=0.002' and 'lr=0.003' both map sweep arms of "
                          "toy.yaml to paper arm '0.001'")
    assert "point one of them at another paper arm, or drop it" in msg and "map one explicitly" not in msg


def test_a_sweep_spec_given_as_an_analysis_spec_says_which_command_takes_it():
    """It said "unknown key 'axes'", as if the user had misspelt a key of a file they never meant to write."""
    path = Path(__file__).parents[3] / "sweeps/quickstart.yaml"
    with pytest.raises(ConfigError) as err:
        load_analysis(path)
    assert str(err.value).startswith(f"{path}: a sweep spec (keys axes, experiment, ")
    assert f"run it with `klear-lab sweep {path}`" in str(err.value)


@pytest.mark.parametrize(("changes", "message"), [
    ({"colour": 1}, "unknown key 'colour'"),
    ({"claim": []}, "unknown key 'claim' (did you mean 'claims'?); allowed: baseline, benchmarks, claims"),
    ({"title": None}, "title: required"),
    ({"paper": {"0.001": [1.0], "0.002": [2.0, 2.0]}}, "paper.0.001: expected 2 values"),
    ({"paper": {"0.001": [1.0, "x"], "0.002": [2.0, 2.0]}}, "paper.0.001: expected numbers or null, got 'x'"),
    ({"baseline": "0.5"}, "baseline: '0.5' is not a paper arm"),
    ({"claims": [{"better": "0.002", "than": "0.01"}]}, "claims[0].than: '0.01' is not a paper arm"),
    ({"claims": [{"better": "0.002", "than": "0.002"}]}, "claims[0]: compares '0.002' with itself"),
    ({"claims": [{"better": "0.002"}]}, "claims[0]: expected {better: ARM, than: ARM"),
    ({"sweeps": ["nope.yaml"]}, "sweeps[0]: "),
    ({"sweeps": ["nope.yaml"]}, "nope.yaml: no such sweep spec"),
    ({"benchmarks": ["A", "A"]}, "benchmarks: names must be distinct"),
    ({"sweeps": [{"spec": "toy.yaml", "arms": {"lr=9": "0.001"}}]}, "sweeps[0].arms.lr=9: not an arm of toy.yaml"),
    ({"sweeps": [{"spec": "toy.yaml", "arms": {"lr=0.001": "zzz"}}]}, "sweeps[0].arms.lr=0.001: 'zzz' is not"),
    ({"sweeps": [{"spec": "toy.yaml", "arms": {"lr=0.001": "0.002", "lr=0.003": "0.002"}}]},
     "sweeps[0].arms: entries 'lr=0.001' and 'lr=0.003' both map sweep arms of toy.yaml to paper arm '0.002'"),
    ({"paper": {"0.001": [1.0, 1.0], "0.5": [1.0, 1.0]}, "claims": []}, "paper: arm '0.5' is matched by no sweep"),
    ({"paper": {"x": [1.0, 1.0]}, "baseline": "x", "claims": []}, "no arm of toy.yaml matches the baseline 'x'"),
    ({"sweeps": [{"spec": "toy.yaml", "metrics": {"C": "val/acc"}}]},
     "sweeps[0].metrics.C: 'C' is not a benchmark of this analysis (benchmarks: A, B)"),
    ({"sweeps": [{"spec": "toy.yaml", "metrics": {"B": "val/b/acc"}}]},
     "sweeps[0].metrics.B: toy.yaml does not record 'val/b/acc' (it records val/acc, train/loss); "
     "add it to that sweep's `metrics:`"),
    ({"sweeps": [{"spec": "toy.yaml", "metrics": ["val/acc"]}]}, "sweeps[0].metrics: expected a mapping"),
    ({"sweeps": [{"spec": "toy.yaml", "metric": {"A": "val/acc"}}]}, "sweeps[0]: expected a spec path or"),
])
def test_bad_analysis_specs_name_file_and_key(tmp_path, changes, message):
    path = write_analysis(tmp_path, **changes)
    with pytest.raises(ConfigError) as err:
        load_analysis(path)
    assert str(path) in str(err.value) and message in str(err.value)


def test_shipped_analyses_load(repo_root):
    paths = sorted(Path(repo_root, "analysis").glob("*.yaml"))
    assert len(paths) >= 9
    for path in paths:
        analysis = load_analysis(path)
        assert analysis.claims and analysis.sweeps, path
        for claim in analysis.claims:  # every shipped claim is one the paper's own numbers support
            if claim.benchmark:  # on one benchmark: a directional claim where the paper prints no number for it
                i = analysis.benchmarks.index(claim.benchmark)
                assert math.isnan(analysis.paper[claim.better][i] - analysis.paper[claim.than][i]), (path, claim)
                continue
            deltas = [b - t for b, t in zip(analysis.paper[claim.better], analysis.paper[claim.than], strict=True)
                      if not math.isnan(b - t)]
            assert sum(d > 0 for d in deltas) > len(deltas) / 2, (path, claim)


def test_a_sweep_not_listed_in_the_analysis_matches_by_label(tmp_path):
    from klear_lab.analysis import _ref_for

    analysis = load_analysis(write_analysis(tmp_path))
    mine = load_spec(write_spec(tmp_path, name="mine", lrs=(0.001, 0.003)))
    ref = _ref_for(analysis, mine, Path(mine.path))
    assert ref.labels == ["lr=0.001", "lr=0.003"] and ref.spec_path == Path(mine.path)
    rep = reproduce(analysis, ref, mine, records({"lr=0.001": [0.1, 0.11], "lr=0.003": [0.3, 0.31]}))
    lacks = "no result (0.002: not an arm of this sweep)"
    assert rep.claims["verdict"].tolist() == [lacks, "contradicted", lacks]
    with pytest.raises(ConfigError, match="matches the baseline '0.001'"):
        other = load_spec(write_spec(tmp_path, name="other", lrs=(0.002, 0.003)))
        _ref_for(analysis, other, Path(other.path))


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    from klear_lab.analysis.report import atomic_write

    target = tmp_path / "arms.csv"
    target.write_text("old\n")

    def half_then_fail(tmp):
        Path(tmp).write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, half_then_fail)
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["arms.csv"]
    atomic_write(target, lambda tmp: Path(tmp).write_text("new\n"))
    assert target.read_text() == "new\n" and [p.name for p in tmp_path.iterdir()] == ["arms.csv"]


def test_ours_is_shown_on_the_papers_scale_only_for_fractions(tmp_path):
    """Percent papers (45.00) show our fractions x 100; fraction papers (0.813) and non-fraction metrics
    (a loss) are shown as logged."""
    from klear_lab.analysis.report import ours_scale

    analysis = load_analysis(write_analysis(tmp_path))
    spec = load_spec(analysis.sweeps[0].spec_path)
    rep = reproduce(analysis, analysis.sweeps[0], spec, records({"lr=0.001": [0.1, 0.2]}))
    assert [ours_scale(rep, m) for m in ("val/acc", "val/aime24/acc_last5", "val/gain", "train/loss")] == \
        [100.0, 100.0, 100.0, 1.0]
    root = Path(__file__).resolve().parents[3]
    fig2 = load_analysis(root / "analysis/fig2_clip.yaml")
    rep = reproduce(fig2, fig2.sweeps[0], load_spec(fig2.sweeps[0].spec_path), [])
    assert ours_scale(rep, "val/acc") == 1.0
