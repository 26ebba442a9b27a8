"""Why a sweep is stopping, as its workers read it: a SIGTERM counts from its handler on."""

from __future__ import annotations

import os
import signal

from sweep_fixtures import write_spec

from klear_lab.errors import INTERRUPTED
from klear_lab.sweep.spec import load_spec
from klear_lab.sweep.terminate import noting_sigterm
from klear_lab.sweep.trial import TERMINATED
from klear_lab.sweep.worker import WorkerContext, note_waiting


def _ctx(tmp_path) -> WorkerContext:
    spec = load_spec(write_spec(tmp_path, seeds=(0,)))
    return WorkerContext(spec=spec, url="sqlite://", frozen_spec=tmp_path / "spec.yaml", workers=1, threads=1)


def test_a_sigterm_is_seen_by_the_workers_before_the_main_thread_sets_stop(tmp_path):
    """Under ``scancel`` the trial gets the same SIGTERM and may end before the main thread's next poll: its
    worker must already read the sweep as stopping, or the trial is judged a plain failure (no retry)."""
    ctx = _ctx(tmp_path)
    with noting_sigterm() as noted:
        ctx.sigterm = noted
        assert ctx.stopping() is None
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs before the next line
        assert not ctx.stop.is_set() and ctx.stopping() == TERMINATED
    assert signal.getsignal(signal.SIGTERM) is not noted  # the handler before it is back


def test_ctrl_c_stops_as_interrupted_and_a_terminated_sweep_as_terminated(tmp_path):
    ctx = _ctx(tmp_path)
    ctx.stop.set()
    assert ctx.stopping() == INTERRUPTED
    ctx.stop_error = TERMINATED
    assert ctx.stopping() == TERMINATED


def test_workers_with_nothing_to_claim_say_once_which_trials_they_wait_on(tmp_path):
    """Rerun after a kill -9, the killed trial stays RUNNING until its heartbeat is old: that wait was silent."""
    import optuna

    from klear_lab.sweep.storage import StudyLock

    ctx = _ctx(tmp_path)
    said: list[str] = []
    ctx.log = said.append
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    lock = StudyLock(f"sqlite:///{tmp_path / 'study.db'}", "toy")
    mine, theirs = study.ask(), study.ask()  # both RUNNING
    ctx.running.add(mine._trial_id)
    note_waiting(ctx, study, lock)
    note_waiting(ctx, study, lock)
    assert said == [f"sweep toy: waiting on trial(s) {theirs.number}, marked running by another process: a live "
                    "worker finishes them; if it died (a kill -9), they are failed and retried here once their "
                    "heartbeat is 2 s old"]
    quiet = _ctx(tmp_path)
    quiet.log = said.append
    quiet.running.update({mine._trial_id, theirs._trial_id})  # only this process's own trials run: no word
    note_waiting(quiet, study, lock)
    assert len(said) == 1
