"""What a SIGTERM'd ``klear-lab sweep`` says: a signal that came during the last trial, which finished first,
left nothing to run, yet the sweep said to rerun it to resume its stopped trials (found by a fresh-user
walkthrough). It still exits 143, which a scheduler reads."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState
from sweep_fixtures import write_spec

from klear_lab.sweep import launch
from klear_lab.sweep.terminate import SweepTerminated
from klear_lab.sweep.trial import TERMINATED

RESUME = "terminated (SIGTERM): rerun the same command to resume (its stopped trials continue from their checkpoints)"


def sweep_terminated_after(tmp_path, monkeypatch, last_state: TrialState) -> tuple[int, list[str], str]:
    """Run a two-point sweep whose workers finish the first trial, end the second in ``last_state`` and stop on
    a SIGTERM (``run_workers`` raising ``SweepTerminated``, as after ``stop_on_sigterm``): (exit code, log, the
    sweep directory)."""
    spec = write_spec(tmp_path, lrs=(0.001, 0.002), trial_start="fresh")

    def workers_stopped_by_sigterm(ctx):
        study = optuna.load_study(study_name=ctx.spec.name, storage=ctx.url)
        for i in range(2):  # the enqueued points, in turn
            trial = study.ask()
            if i == 0 or last_state == TrialState.COMPLETE:
                study.tell(trial, 0.5)
            else:  # stopped at a checkpoint: failed, its retry queued
                trial.set_user_attr("error", TERMINATED)
                study.tell(trial, state=TrialState.FAIL)
        raise SweepTerminated

    monkeypatch.setattr(launch, "run_workers", workers_stopped_by_sigterm)
    said: list[str] = []
    code = launch.run_sweep(spec, compare=False, log=said.append)
    return code, said, str(tmp_path / "out" / "toy")


def test_a_sigterm_during_the_last_trial_that_finished_says_nothing_is_left(tmp_path, monkeypatch):
    code, said, sweep_dir = sweep_terminated_after(tmp_path, monkeypatch, TrialState.COMPLETE)
    assert code == 143
    assert said[-1] == ("terminated (SIGTERM) after every trial had finished (trials {'COMPLETE': 2}): nothing is "
                        f"left to run; its comparison table: klear-lab compare {sweep_dir}")


def test_a_sigterm_that_stopped_a_trial_says_to_rerun(tmp_path, monkeypatch):
    code, said, _ = sweep_terminated_after(tmp_path, monkeypatch, TrialState.FAIL)
    assert code == 143
    assert said[-1] == RESUME


def test_trials_a_plugin_failed_are_told_to_fix_its_code_not_the_config():
    from types import SimpleNamespace

    from klear_lab.sweep.launch import _next_step

    component = SimpleNamespace(number=3, user_attrs={"error": "klear_lab.errors.ComponentError: reward 'mine' …"})
    said = _next_step([component], "finish")
    assert said.startswith("fix the component's code (a plugin's) first: 1 trial(s) failed on a component's error")
    config = SimpleNamespace(number=1, user_attrs={"error": "klear_lab.errors.ConfigError: optim.lr …"})
    assert _next_step([config], "finish").startswith("fix the config first: 1 trial(s) failed on a config or data")
