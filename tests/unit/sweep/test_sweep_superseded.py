"""Runs a point's later attempt started over are marked superseded (``retry.superseded_runs``,
``run_status.mark_superseded``, ``worker._mark_superseded``), including a run its trial made and was killed
before recording in the study, and a run that failed on its own error."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
from optuna.trial import TrialState
from sweep_fixtures import write_spec

from klear_lab.run_list import list_runs
from klear_lab.sweep.checks import check_spec
from klear_lab.sweep.claim import take_trial, trial_values
from klear_lab.sweep.grid import trial_layer
from klear_lab.sweep.queue import prepare_study
from klear_lab.sweep.retry import queue_retry, superseded_runs
from klear_lab.sweep.run_status import RUN_DIR_ATTR
from klear_lab.sweep.spec import load_spec
from klear_lab.sweep.storage import StudyLock, default_storage_url, open_study
from klear_lab.sweep.trial import job_stem
from klear_lab.sweep.worker import WorkerContext, _mark_superseded
from klear_lab.tracking import write_config


def _setup(tmp_path):
    spec = load_spec(write_spec(tmp_path, lrs=(0.001,)))
    url = default_storage_url(spec)
    study = open_study(spec, url, create=True)
    lock = StudyLock(url, spec.name)
    prepare_study(study, spec, check_spec(spec), lock)
    return spec, url, study, lock


def _dead_pid() -> int:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


def _claim(study, spec, lock) -> tuple[int, dict]:
    """Claim the next trial as a worker does (:func:`_job`); its id and composed config."""
    trial_id = take_trial(study, spec, lock)
    return trial_id, _job(spec, study, trial_id)


def _job(spec, study, trial_id: int) -> dict:
    """Record a claimed trial's point and write its job file, as a worker does; its composed config."""
    trial = optuna.trial.Trial(study, trial_id)
    values, seed, label = trial_values(trial, spec)
    cfg = spec.compose([trial_layer(spec, values, seed, trial.number, None, label)])
    job = job_stem(spec.sweep_dir, trial.number).with_suffix(".json")
    job.parent.mkdir(parents=True, exist_ok=True)
    job.write_text(json.dumps({"number": trial.number, "config": cfg}, default=str))
    return cfg


def _run(spec, name: str, cfg: dict | None, record: dict) -> Path:
    """A run directory in the sweep's ``runs/`` as ``run_experiment`` leaves it (``config.yaml``, ``run.json``)."""
    run_dir = spec.runs_dir / name
    run_dir.mkdir(parents=True)
    if cfg is not None:
        write_config(run_dir, cfg)
    (run_dir / "run.json").write_text(json.dumps({**record, "tags": ["kind:sft", "seed:0"]}))
    return run_dir


def _killed(pid: int) -> dict:
    return {"status": "running", "pid": pid, "pid_start": 1, "host": socket.gethostname()}


def _ctx(spec, url, said: list[str]) -> WorkerContext:
    return WorkerContext(spec=spec, url=url, frozen_spec=spec.sweep_dir / "spec.yaml", workers=1, threads=None,
                         log=said.append)


def test_a_run_its_trial_never_recorded_is_superseded_by_the_next_attempt(tmp_path):
    """A trial killed after ``run_experiment`` made its run directory and before training started (where
    ``RecordRunDir`` names it in the study) left a run no retry named superseded: "running" for ever
    (``klear-lab runs``: stopped, "run the sweep again", which does nothing once the point finished)."""
    spec, url, study, lock = _setup(tmp_path)
    storage = study._storage
    first, cfg = _claim(study, spec, lock)
    orphan = _run(spec, "toy-lr-0.001-20250101-000000-abcdef-s0", cfg, _killed(_dead_pid()))
    other_trial = json.loads(json.dumps(cfg))
    other_trial["run"]["notes"] = "sweep toy trial 7"  # another trial's run: not this one's
    _run(spec, "toy-lr-0.001-20250101-000001-abcdef-s0", other_trial, _killed(_dead_pid()))
    storage.set_trial_state_values(first, TrialState.FAIL)  # killed before RecordRunDir: no run_dir
    retry = queue_retry(study, storage.get_trial(first))
    assert take_trial(study, spec, lock) == retry._trial_id
    new_run = _run(spec, "toy-lr-0.001-20250101-000100-abcdef-s0", None, {"status": "completed"})
    storage.set_trial_user_attr(retry._trial_id, RUN_DIR_ATTR, str(new_run))
    storage.set_trial_state_values(retry._trial_id, TrialState.COMPLETE, [0.5])
    assert superseded_runs(study, spec, retry._trial_id) == [(str(orphan), str(new_run), retry.number)]
    said: list[str] = []
    _mark_superseded(_ctx(spec, url, said), study, retry._trial_id, 0)
    rows = {row.run_dir: row for row in list_runs([spec.runs_dir])}
    assert rows[str(orphan)].status == "failed"
    assert rows[str(orphan)].note == f"superseded: its trial's retry started over in {new_run} (trial {retry.number})"
    assert len(said) == 1 and said[0].startswith(f"[worker 0] {orphan}: superseded by trial {retry.number}'s run")
    assert rows[str(spec.runs_dir / "toy-lr-0.001-20250101-000001-abcdef-s0")].status == "stopped"


def test_an_unrecorded_run_in_a_chain_of_attempts_is_superseded_in_turn(tmp_path):
    """A (run a, killed) -> B (started over in b, killed before recording it: inherits a) -> C (run c): a was
    started over in b, and b in c; an unrecorded run older than its trial is another study's, left alone."""
    spec, url, study, lock = _setup(tmp_path)
    storage = study._storage
    first, _ = _claim(study, spec, lock)
    a = _run(spec, "a", None, _killed(_dead_pid()))
    storage.set_trial_user_attr(first, RUN_DIR_ATTR, str(a))
    storage.set_trial_state_values(first, TrialState.FAIL)
    second = queue_retry(study, storage.get_trial(first))
    assert take_trial(study, spec, lock) == second._trial_id
    cfg = _job(spec, study, second._trial_id)
    old = _run(spec, "b-old", cfg, _killed(_dead_pid()))  # the same trial number in a study made anew since
    then = time.time() - 3600
    os.utime(old / "config.yaml", (then, then))
    b = _run(spec, "b", cfg, _killed(_dead_pid()))
    storage.set_trial_state_values(second._trial_id, TrialState.FAIL)
    assert superseded_runs(study, spec, second._trial_id) == [(str(a), str(b), second.number)]
    third = queue_retry(study, storage.get_trial(second._trial_id))
    assert take_trial(study, spec, lock) == third._trial_id
    c = _run(spec, "c", None, {"status": "completed"})
    storage.set_trial_user_attr(third._trial_id, RUN_DIR_ATTR, str(c))
    storage.set_trial_state_values(third._trial_id, TrialState.COMPLETE, [0.5])
    assert superseded_runs(study, spec, third._trial_id) == [(str(a), str(b), second.number),
                                                            (str(b), str(c), third.number)]


def test_a_failed_run_whose_point_a_later_attempt_ran_again_is_superseded_keeping_its_error(tmp_path):
    """A run that failed on its own error (a crash, a failed download) whose point a later attempt (a retry,
    a rerun of the sweep) started over: ``klear-lab runs`` advised fixing or rerunning a run the sweep had
    already run again."""
    spec, url, study, lock = _setup(tmp_path)
    storage = study._storage
    first = take_trial(study, spec, lock)
    trial_values(optuna.trial.Trial(study, first), spec)
    crashed = _run(spec, "crashed", None, {"status": "failed", "error": "RuntimeError: boom",
                                           "host": socket.gethostname()})
    storage.set_trial_user_attr(first, RUN_DIR_ATTR, str(crashed))
    storage.set_trial_state_values(first, TrialState.FAIL)
    assert prepare_study(study, spec, check_spec(spec), lock)[1] == 1  # the rerun enqueues the point again
    again = take_trial(study, spec, lock)
    new_run = _run(spec, "new", None, {"status": "completed"})
    storage.set_trial_user_attr(again, RUN_DIR_ATTR, str(new_run))
    storage.set_trial_state_values(again, TrialState.COMPLETE, [0.5])
    number = storage.get_trial(again).number
    _mark_superseded(_ctx(spec, url, []), study, again, 0)
    record = json.loads((crashed / "run.json").read_text())
    assert record["status"] == "failed" and record["error"] == (
        f"superseded: its trial's retry started over in {new_run} (trial {number}); its own error: RuntimeError: boom")
    (row,) = [row for row in list_runs([spec.runs_dir]) if row.run_dir == str(crashed)]
    assert row.note == record["error"]  # no advice to fix or rerun it
    _mark_superseded(_ctx(spec, url, []), study, again, 0)  # once
    assert json.loads((crashed / "run.json").read_text())["error"] == record["error"]
