"""Races between sweep workers on one SQLite study, and claims that must not strand a trial."""

from __future__ import annotations

import threading
import time

import optuna
import pytest
from optuna.trial import TrialState
from sweep_fixtures import write_spec

from klear_lab.errors import ConfigError
from klear_lab.sweep.checks import check_spec
from klear_lab.sweep.claim import fail_stale, take_trial
from klear_lab.sweep.queue import check_same_base, prepare_study, study_base
from klear_lab.sweep.retry import NOT_BEFORE_ATTR
from klear_lab.sweep.spec import load_spec
from klear_lab.sweep.storage import StudyLock, default_storage_url, open_study


def _setup(tmp_path, **extra):
    spec = load_spec(write_spec(tmp_path, seeds=(0, 1), **extra))
    arms = check_spec(spec)
    url = default_storage_url(spec)
    study = open_study(spec, url, create=True)
    lock = StudyLock(url, spec.name)
    prepare_study(study, spec, arms, lock)
    return spec, url, study, lock


def test_workers_failing_dead_trials_together_queue_one_retry_each(tmp_path):
    """SQLite ignores Optuna's FOR UPDATE: workers that found the same dead trials all failed them, and
    each queued a retry (2 to 4 per point in the review's runs), so a point finished twice. A race: without
    the lock this test fails in most runs, not all; with it, it cannot."""
    spec, url, study, lock = _setup(tmp_path)
    dead = [take_trial(study, spec, lock) for _ in range(6)]  # claimed, then their worker is killed
    time.sleep(2 * spec.heartbeat_interval + 1.5)
    start = threading.Barrier(6)

    def worker() -> None:
        own = open_study(spec, url, create=False)
        start.wait()
        fail_stale(own, StudyLock(url, spec.name))

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    retries = [t.system_attrs.get("failed_trial") for t in study.get_trials(states=(TrialState.WAITING,))]
    numbers = [study._storage.get_trial(tid).number for tid in dead]
    assert sorted(r for r in retries if r is not None) == sorted(numbers)  # one retry per dead trial


def test_a_held_back_retry_is_not_asked_for_by_a_random_sweep(tmp_path):
    """``study.ask()`` takes the first WAITING trial itself: a retry held back after a network failure
    ran at once, so an outage used up every retry of a point in seconds."""
    spec, url, study, lock = _setup(tmp_path, sampler="random", n_trials=4,
                                    axes={"optim.lr": {"low": 1e-4, "high": 1e-2, "log": True}})
    study.enqueue_trial({"optim.lr": 1e-3}, user_attrs={"arm": "lr=0.001", "seed": 0})
    (held,) = study.get_trials(states=(TrialState.WAITING,))
    study._storage.set_trial_system_attr(held._trial_id, NOT_BEFORE_ATTR, time.time() + 60)
    assert take_trial(study, spec, lock) is None  # the workers wait; none asks for a new trial meanwhile
    assert study._storage.get_trial(held._trial_id).state == TrialState.WAITING
    study._storage.set_trial_system_attr(held._trial_id, NOT_BEFORE_ATTR, time.time() - 1)
    assert take_trial(study, spec, lock) == held._trial_id


def test_a_claim_whose_heartbeat_fails_leaves_the_trial_waiting(tmp_path, monkeypatch):
    """A RUNNING trial without a heartbeat is never found stale (Optuna skips it): claimed and then
    left so by a failed first heartbeat, it kept the sweep waiting for good."""
    spec, url, study, lock = _setup(tmp_path)
    storage = study._storage

    def down(trial_id):
        raise RuntimeError("database is locked")

    monkeypatch.setattr(storage, "record_heartbeat", down)
    with pytest.raises(RuntimeError, match="database is locked"):
        take_trial(study, spec, lock)
    assert {t.state for t in study.get_trials()} == {TrialState.WAITING}
    monkeypatch.undo()
    assert take_trial(study, spec, lock) is not None


def test_a_joiner_must_keep_the_studys_heartbeat_interval(tmp_path):
    """A joiner with a shorter interval has a shorter grace period: it would fail the other workers' live
    trials as stale and run their retries beside them."""
    spec, url, study, lock = _setup(tmp_path)
    joiner = load_spec(spec.path)
    joiner.heartbeat_interval = spec.heartbeat_interval + 4
    with pytest.raises(ConfigError, match=r"heartbeat_interval: the study has 1, the spec 5"):
        check_same_base(study, joiner, joining=True)
    check_same_base(study, joiner, base=study_base(joiner))  # a rerun, nothing running: it may change it
    take_trial(study, spec, lock)  # a live worker's trial
    with pytest.raises(ConfigError, match=r"heartbeat_interval: trials .* running with 1 s heartbeats and the "
                                          r"spec says 5; keep 1 while they run"):
        check_same_base(study, joiner, base=study_base(joiner))  # a rerun beside live (or dead) workers may not
    study.set_user_attr("klear.base", {k: v for k, v in study_base(spec).items() if k != "heartbeat_interval"})
    check_same_base(study, joiner, joining=True)  # a study from before the key: not compared


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_widening_after_a_kill_says_when_to_run_again(tmp_path):
    from klear_lab.sweep.grid import grid_arms

    spec, url, study, lock = _setup(tmp_path)
    take_trial(study, spec, lock)  # running (or killed, its heartbeat not stale yet)
    wider = load_spec(write_spec(tmp_path, lrs=(0.001, 0.002, 0.003, 0.004), seeds=(0, 1)))
    with pytest.raises(ConfigError, match=r"count as running until their heartbeats are 2 s old"):
        prepare_study(open_study(wider, url, create=False), wider, grid_arms(wider), StudyLock(url, wider.name))
    optuna.delete_study(study_name=spec.name, storage=study._storage)


def test_a_queued_retry_is_found_and_held_back_longer_each_time(tmp_path):
    """The retry of a killed trial is found through Optuna's ``retry_history``, and each further retry of
    the same point is held back twice as long as the one before."""
    from klear_lab.sweep.retry import hold_retry, queue_retry

    spec, url, study, lock = _setup(tmp_path)
    first = study._storage.get_trial(take_trial(study, spec, lock))
    study._storage.set_trial_state_values(first._trial_id, TrialState.FAIL)
    retry = queue_retry(study, study._storage.get_trial(first._trial_id))
    assert retry is not None and retry.user_attrs["point"] == first.user_attrs["point"]
    assert hold_retry(study, retry, 10.0) == 10.0
    study._storage.set_trial_state_values(retry._trial_id, TrialState.RUNNING)
    study._storage.set_trial_state_values(retry._trial_id, TrialState.FAIL)
    second = queue_retry(study, study._storage.get_trial(retry._trial_id))
    assert second is not None and second.number != retry.number
    assert hold_retry(study, second, 10.0) == 20.0
    held = study._storage.get_trial(second._trial_id).system_attrs[NOT_BEFORE_ATTR]
    assert held > time.time() + 15


def test_a_queued_retry_is_taken_before_the_points_not_started(tmp_path):
    """After Ctrl-C the rerun started the next arm and left the killed trial's retry (which continues its
    run from the checkpoint) behind it (found by a new-user walkthrough)."""
    from klear_lab.sweep.retry import queue_retry

    spec, url, study, lock = _setup(tmp_path)
    first = study._storage.get_trial(take_trial(study, spec, lock))
    study._storage.set_trial_state_values(first._trial_id, TrialState.FAIL)  # killed by Ctrl-C
    retry = queue_retry(study, study._storage.get_trial(first._trial_id))
    assert len(study.get_trials(states=(TrialState.WAITING,))) > 1  # points not started wait before it
    assert take_trial(study, spec, lock) == retry._trial_id


def test_a_claim_is_recorded_as_this_processes_under_the_lock(tmp_path):
    """A sibling worker reading the study under the lock must never see a fresh claim as another process's
    (``worker.note_waiting`` said "waiting on trial 0, marked running by another process")."""
    spec, _, study, lock = _setup(tmp_path)
    mine: set[int] = set()
    seen_inside: list[bool] = []
    real_hold = lock.hold

    def watching_hold():  # what a reader holding the lock next finds: the claim and its record together
        cm = real_hold()

        class Watch:
            def __enter__(self):
                return cm.__enter__()

            def __exit__(self, *exc):
                running = {t._trial_id for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
                seen_inside.append(running <= mine)
                return cm.__exit__(*exc)
        return Watch()

    lock.hold = watching_hold
    first = take_trial(study, spec, lock, mine=mine)
    assert mine == {first} and seen_inside == [True]
    assert take_trial(study, spec, lock) not in mine  # without ``mine`` nothing is recorded
