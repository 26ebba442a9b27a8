"""The notes under the comparison table: an unstarred arm whose seeds partly diverged, a baseline never sampled."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from rich.console import Console
from sweep_fixtures import sampled_study, write_spec

from klear_lab.errors import ConfigError
from klear_lab.sweep.compare import TrialRecord, compare_study, summarize, write_comparison
from klear_lab.sweep.compare_text import to_markdown
from klear_lab.sweep.spec import load_spec


def _arms(values: dict[str, list[float]], failed: dict[str, int] | None = None) -> list[TrialRecord]:
    records = [TrialRecord(arm, s, "COMPLETE", {"m": v}) for arm, vs in values.items() for s, v in enumerate(vs)]
    for arm, k in (failed or {}).items():  # the arm's next seeds
        records += [TrialRecord(arm, len(values[arm]) + s, "FAIL") for s in range(k)]
    return records


def test_an_arm_whose_seeds_partly_diverged_is_not_starred(tmp_path):
    """b was starred on its 2 finite seeds while its third had diverged: a best arm crowned on its lucky seeds."""
    records = _arms({"a": [0.50, 0.52, 0.51], "b": [0.70, 0.72, math.inf], "c": [0.40, 0.41, 0.42]})
    df = summarize(records, "m", [], "maximize", "a", ["a", "b", "c"])
    assert df.loc[df["best"], "arm"].tolist() == ["a"]
    note = "arm b has a higher mean on 2 of 3 seeds; not starred: 1 seed diverged"
    assert note in to_markdown(df, "m", [], "a")
    spec = load_spec(write_spec(tmp_path))
    spec.metric, spec.metrics = "m", []
    console = Console(record=True, width=200)
    write_comparison(records, spec, "a", ["a", "b", "c"], tmp_path / "cmp", console)
    text = console.export_text()
    assert "★ a" in text and "★ b" not in text and note in text
    csv = pd.read_csv(tmp_path / "cmp" / "table.csv", keep_default_na=False).set_index("arm")
    assert csv["best"].to_dict() == {"a": True, "b": False, "c": False}  # the CSV stars what the table stars
    assert csv.loc["b", "best note"].startswith("has a higher mean") and csv.loc["a", "best note"] == ""
    assert note in (tmp_path / "cmp" / "table.md").read_text()


def test_a_failed_seed_also_keeps_the_star_off_and_a_worse_incomplete_arm_gets_no_note():
    records = _arms({"a": [0.30, 0.31, 0.32], "b": [0.10, 0.11], "c": [0.90, math.inf, 0.91]}, failed={"b": 1})
    df = summarize(records, "m", [], "minimize", "a", ["a", "b", "c"])
    assert df.loc[df["best"], "arm"].tolist() == ["a"]
    assert df["best note"].tolist() == ["", "has a lower mean on 2 of 3 seeds; not starred: 1 seed failed", ""]


def test_an_arm_with_pruned_or_unfinished_seeds_is_not_starred():
    """b's one finished seed beat a's three; its other two were pruned (or, mid-sweep, not run yet)."""
    records = _arms({"a": [0.50, 0.52, 0.51], "b": [0.90]})
    for how in ("pruned", "not finished"):
        extra = [TrialRecord("b", s, "PRUNED") for s in (1, 2)] if how == "pruned" else []
        df = summarize(records + extra, "m", [], "maximize", "a", ["a", "b"])
        assert df.loc[df["best"], "arm"].tolist() == ["a"]
        assert df["best note"].tolist() == ["", f"has a higher mean on 1 of 3 seeds; not starred: 2 seeds {how}"]


def test_without_a_complete_arm_the_best_mean_is_starred_and_the_note_says_so():
    records = _arms({"a": [0.5, math.inf, 0.4, 0.45], "b": [0.7, 0.72]}, failed={"b": 2})
    df = summarize(records, "m", [], "maximize", "a", ["a", "b"])
    assert df.loc[df["best"], "arm"].tolist() == ["b"]
    md = to_markdown(df, "m", [], "a")
    assert "arm b starred on 2 of 4 seeds: no arm has a finite m on every seed (2 seeds failed)" in md
    assert "arm a" not in md


@pytest.mark.parametrize("baseline", ["lr=0.001", {"optim.lr": 0.001}])
def test_a_baseline_the_sampler_never_drew_still_gets_the_table(tmp_path, baseline):
    """All axes discrete, so the baseline was allowed, but no trial drew lr=0.001: compare refused the
    whole sweep at its end ("no arm is labelled")."""
    spec, study = sampled_study(tmp_path, [(0.002, 0), (0.003, 0), (0.002, 1)], baseline=baseline)
    console = Console(record=True, width=200)
    df = compare_study(spec, study, console=console, require_finished=True)
    assert df["arm"].tolist() == ["lr=0.002", "lr=0.003"] and df["delta"].isna().all()
    assert not df["baseline"].any() and df.loc[df["best"], "arm"].tolist() == ["lr=0.002"]  # 0.003: one seed
    note = "baseline arm lr=0.001 was never sampled: no deltas"
    assert note in console.export_text()
    assert note in (spec.sweep_dir / "compare" / "table.md").read_text()
    assert (spec.sweep_dir / "compare" / "table.csv").is_file()


def test_a_baseline_no_arm_of_the_axes_can_match_is_still_an_error(tmp_path):
    spec, study = sampled_study(tmp_path, [(0.002, 0)], baseline="lr=0.005")
    with pytest.raises(ConfigError, match="no arm is labelled 'lr=0.005'"):
        compare_study(spec, study, console=Console(record=True))


def test_a_sampled_baseline_gets_its_deltas_and_no_note(tmp_path):
    spec, study = sampled_study(tmp_path, [(0.002, 0), (0.003, 0)], baseline="lr=0.002")
    console = Console(record=True, width=200)
    df = compare_study(spec, study, console=console).set_index("arm")
    assert df.loc["lr=0.002", "baseline"] and abs(df.loc["lr=0.003", "delta"] - 0.1) < 1e-9
    assert "never sampled" not in console.export_text()


def test_a_rescore_of_such_a_sweep_also_gets_its_table(tmp_path):
    """``compare --rescore`` builds its table the same way: it failed as the end-of-sweep compare did."""
    from klear_lab.sweep.compare import load_records
    from klear_lab.sweep.rescore import write_table

    spec, study = sampled_study(tmp_path, [(0.002, 0), (0.003, 0)], baseline="lr=0.001")
    console = Console(record=True, width=200)
    df = write_table(spec, load_records(spec, study), ["eval.samples=2"], {}, console)
    assert df["arm"].tolist() == ["lr=0.002", "lr=0.003"] and df["delta"].isna().all()
    assert "baseline arm lr=0.001 was never sampled: no deltas" in console.export_text()


def test_a_rescore_override_that_is_not_key_value_stops_before_any_trial(tmp_path):
    """``compare SWEEP --rescore notkv`` was told "notkv does not change an evaluation", and only once a
    trial had a run to score: a sweep whose runs were gone logged each trial as failed first."""
    from klear_lab.sweep.rescore import rescore_study

    spec, study = sampled_study(tmp_path, [(0.002, 0), (0.003, 0)], baseline="lr=0.002")
    logged: list[str] = []
    with pytest.raises(ConfigError, match=r"^--rescore: override 'notkv' must look like key=value$"):
        rescore_study(spec, study, ["eval.samples=2", "notkv"], log=logged.append)
    assert logged == [] and not spec.sweep_dir.exists()


def test_a_baseline_whose_trials_all_failed_says_why_there_are_no_deltas():
    """Every delta was "–" with no word why when the baseline arm's seeds had all failed."""
    records = _arms({"a": [], "b": [0.5, 0.6]}, failed={"a": 2})
    df = summarize(records, "m", [], "maximize", "a", ["a", "b"])
    assert df["delta"].isna().all()
    text = to_markdown(df, "m", [], "a")
    assert "baseline arm a has no finished trial: 2 failed (see the trial logs under trials/), so no deltas" in text
    fine = summarize(_arms({"a": [0.4, 0.5], "b": [0.5, 0.6]}), "m", [], "maximize", "a", ["a", "b"])
    assert "no finished trial" not in to_markdown(fine, "m", [], "a")
