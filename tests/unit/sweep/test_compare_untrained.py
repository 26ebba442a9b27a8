"""``compare`` flags RL arms whose trials never updated the policy (every group filtered out): their
val/acc is the starting model's, not a trained arm's."""

from __future__ import annotations

import json

from rich.console import Console
from sweep_fixtures import write_spec

from klear_lab.sweep.compare import TrialRecord, write_comparison
from klear_lab.sweep.spec import load_spec

TRAINED = {"rl/rollout_steps": 2.0, "train/steps": 2.0, "rl/trained_groups": 3.0}
UNTRAINED = {"rl/rollout_steps": 2.0, "train/steps": 0.0, "rl/trained_groups": 0.0}


def test_arms_with_trials_that_never_updated_are_flagged(tmp_path):
    spec = load_spec(write_spec(tmp_path))
    old_run = tmp_path / "run-b-s0"  # metrics from before train/steps was returned: the run's summary says
    old_run.mkdir()
    (old_run / "summary.json").write_text(json.dumps({"val/acc": 0.5, **UNTRAINED}))
    records = [TrialRecord("a", 0, "COMPLETE", {"val/acc": 0.5, **UNTRAINED}),
               TrialRecord("a", 1, "COMPLETE", {"val/acc": 0.5, **UNTRAINED}),
               TrialRecord("b", 0, "COMPLETE", {"val/acc": 0.5}, run_dir=str(old_run)),
               TrialRecord("b", 1, "COMPLETE", {"val/acc": 0.6, **TRAINED}),
               TrialRecord("c", 0, "COMPLETE", {"val/acc": 0.7, **TRAINED}),
               TrialRecord("c", 1, "FAIL", UNTRAINED)]  # a failed trial is not a finished one
    console = Console(record=True, width=400)
    write_comparison(records, spec, "a", ["a", "b", "c"], tmp_path / "cmp", console)
    text, markdown = console.export_text(), (tmp_path / "cmp" / "table.md").read_text()
    for out in (text, markdown):
        assert "arm a: 2 of 2 trial(s) never updated the policy (rl/trained_groups 0" in out
        assert "arm b: 1 of 2 trial(s) never updated the policy" in out
        assert "arm c:" not in out and "starting model's" in out


def test_sft_trials_are_not_flagged(tmp_path):
    spec = load_spec(write_spec(tmp_path))
    records = [TrialRecord("a", 0, "COMPLETE", {"val/acc": 0.5, "train/steps": 0.0})]  # no rollout steps: not RL
    console = Console(record=True, width=400)
    write_comparison(records, spec, "a", ["a"], tmp_path / "cmp", console)
    assert "never updated" not in console.export_text()


def test_a_rescored_table_keeps_the_flag_its_eval_runs_cannot_show(tmp_path):
    """The rescored records hold the eval runs' metrics (no rl/trained_groups): the note went missing."""
    import dataclasses

    from klear_lab.sweep.compare_text import untrained_notes
    from klear_lab.sweep.rescore import write_table

    spec = load_spec(write_spec(tmp_path))
    trials = [TrialRecord("lr=0.001", 0, "COMPLETE", {"val/acc": 0.5, **UNTRAINED}),
              TrialRecord("lr=0.002", 0, "COMPLETE", {"val/acc": 0.6, **TRAINED})]
    rescored = [dataclasses.replace(t, metrics={"val/acc": t.metrics["val/acc"] + 0.01}) for t in trials]
    console = Console(record=True, width=400)
    write_table(spec, rescored, ["eval.samples=2"], {}, console, untrained_notes(trials))
    (out_dir,) = spec.sweep_dir.glob("rescore-*")
    for out in (console.export_text(), (out_dir / "table.md").read_text()):
        assert "arm lr=0.001: 1 of 1 trial(s) never updated the policy" in out and "lr=0.002:" not in out
