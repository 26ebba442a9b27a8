"""The progress line a sweep prints after each trial."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from klear_lab.sweep.progress import Progress


def _study_with(states: list[TrialState]) -> optuna.Study:
    study = optuna.create_study()
    for state in states:
        study.add_trial(optuna.create_trial(state=state, value=1.0 if state == TrialState.COMPLETE else None))
    return study


def test_trials_finished_and_time_left():
    progress = Progress(total=8, workers=2)
    study = _study_with([TrialState.COMPLETE])
    assert progress.record(study, TrialState.COMPLETE, 20.0) == "1/8 finished, about 70 s left"  # 20 x 7 / 2
    study = _study_with([TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL])
    assert progress.record(study, TrialState.PRUNED, 220.0) == "2/8 finished, about 6 min left"  # 120 x 6 / 2
    # a failure here is not run again until the rerun: one trial fewer left, and no duration to average
    assert progress.record(study, TrialState.FAIL, 5.0) == "2/8 finished, about 5 min left"  # 120 x 5 / 2


def test_the_last_trial_and_a_sweep_whose_trials_all_failed():
    assert Progress(total=1, workers=1).record(_study_with([TrialState.COMPLETE]), TrialState.COMPLETE,
                                               3.0) == "1/1 finished"
    assert Progress(total=3, workers=1).record(_study_with([TrialState.FAIL]), TrialState.FAIL, 3.0) == "0/3 finished"


def test_a_sampler_sweep_replaces_its_failures():
    """tpe/random: a failed trial is followed by a new one in the same run, so it still counts as left."""
    progress = Progress(total=4, workers=1, replaces_failures=True)
    study = _study_with([TrialState.COMPLETE, TrialState.FAIL])
    progress.record(study, TrialState.COMPLETE, 60.0)
    assert progress.record(study, TrialState.FAIL, 5.0) == "1/4 finished, about 3 min left"  # 60 x 3 / 1


def test_a_grid_counts_its_own_points_only():
    """Rerun with an axis value dropped, the dropped points' finished trials made "5/4 finished"."""
    from klear_lab.sweep.grid import point_key

    kept = [point_key({"optim.lr": lr}, 0) for lr in (0.001, 0.002, 0.003, 0.004)]
    study = optuna.create_study()
    for point in [*kept[:3], point_key({"optim.lr": 0.5}, 0), point_key({"optim.lr": 0.6}, 0)]:
        study.add_trial(optuna.create_trial(state=TrialState.COMPLETE, value=1.0, user_attrs={"point": point}))
    assert Progress(total=4, workers=1).record(study, TrialState.COMPLETE, 1.0).startswith("5/4 finished")
    line = Progress(total=4, workers=1, points=frozenset(kept)).record(study, TrialState.COMPLETE, 1.0)
    assert line == "3/4 finished, about 1 s left"


def _two_trials_ended_3_ms_apart() -> tuple[optuna.Study, list]:
    """A study whose two complete trials both told it before either worker printed; their end times."""
    from datetime import datetime, timedelta

    first = datetime(2026, 12, 7, 12, 0, 0)
    study = optuna.create_study()
    for ended in (first, first + timedelta(milliseconds=3)):
        trial = optuna.create_trial(state=TrialState.COMPLETE, value=1.0)
        trial.datetime_start, trial.datetime_complete = ended - timedelta(seconds=10), ended
        study.add_trial(trial)
    return study, [t.datetime_complete for t in study.trials]


def test_two_trials_that_end_together_are_counted_one_after_the_other():
    """Both workers told the study before either printed: each line counted both ("2/4 finished" twice)."""
    study, ends = _two_trials_ended_3_ms_apart()
    progress = Progress(total=4, workers=2)
    assert progress.record(study, TrialState.COMPLETE, 10.0, ends[0]) == "1/4 finished, about 15 s left"
    assert progress.record(study, TrialState.COMPLETE, 10.0, ends[1]) == "2/4 finished, about 10 s left"
    assert progress.record(study, TrialState.FAIL, 0.0).startswith("2/4 finished")  # no time: all so far


def test_a_line_printed_after_a_later_ended_trials_never_counts_fewer():
    """The worker whose trial ended later took the lock first: "2/4" then "1/4" was printed (a red team)."""
    study, ends = _two_trials_ended_3_ms_apart()
    progress = Progress(total=4, workers=2)
    assert progress.record(study, TrialState.COMPLETE, 10.0, ends[1]).startswith("2/4 finished")
    assert progress.record(study, TrialState.COMPLETE, 10.0, ends[0]).startswith("2/4 finished")
