"""Worker threads: claim a trial, compose its config, run it in a child process, keep it alive.

Each worker thread loops: fail stale trials (heartbeat) -> claim a WAITING trial (or ask the
sampler) -> compose the base experiment plus the ``sweep trial N`` layer -> write the job
file -> start the trial process (forked from the preloaded server or a fresh ``python -m
klear_lab.sweep.trial``, see ``launcher.py``) with ``OMP_NUM_THREADS`` = cores // workers and
wait for it, a heartbeat recorded every interval from the claim on. It stops when nothing is WAITING and no
trial is RUNNING anywhere in the study (so resumed sweeps wait for retried trials).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from klear_lab.console import say
from klear_lab.errors import INTERRUPTED, ConfigError
from klear_lab.hardware import auto_threads
from klear_lab.sweep.claim import beating, claimed_trial, fail_stale, take_trial, trial_values
from klear_lab.sweep.grid import trial_layer
from klear_lab.sweep.identity import check_plugins_unchanged
from klear_lab.sweep.launcher import kill_all, reset_stop, run_trial_process
from klear_lab.sweep.progress import Progress
from klear_lab.sweep.queue import count
from klear_lab.sweep.retry import hold_retry, queue_retry, resumable_run, superseded_runs
from klear_lab.sweep.run_status import mark_interrupted, mark_superseded
from klear_lab.sweep.spec import SweepSpec
from klear_lab.sweep.storage import SUCCESSOR_ATTR, StudyLock, current_study, open_study
from klear_lab.sweep.terminate import (
    KILL_WAIT_S,
    SigtermNoted,
    SweepTerminated,
    grace_s,
    noting_sigterm,
    stop_on_sigterm,
    wait_for_workers,
)
from klear_lab.sweep.trial import CONFIG_ERROR_ATTR, NO_OBJECTIVE_ATTR, TERMINATED, TRANSIENT_ATTR, job_stem

_COMPOSE_LOCK = threading.Lock()
MAX_FAILED_IN_A_ROW = 5  # tpe/random: stop asking for new trials after this many failed in a row here


@dataclass
class WorkerContext:
    """What every worker thread of one ``klear-lab sweep`` process shares."""

    spec: SweepSpec
    url: str
    frozen_spec: Path
    workers: int
    threads: int | None
    stop: threading.Event = field(default_factory=threading.Event)
    log: Callable[[str], None] = say
    poll_s: float = 2.0
    progress: Progress | None = None
    failed_in_a_row: int = 0  # trials of this process, any worker; a finished one resets it
    no_objective: str | None = None  # a run finished without the objective: no worker claims another trial
    stop_error: str = INTERRUPTED  # why ``stop`` was set (Ctrl-C, or SIGTERM): what the trials it stopped record
    sigterm: SigtermNoted | None = None  # the sweep's SIGTERM handler while the workers run
    running: set[int] = field(default_factory=set)  # ids of the trials this process's workers run
    told_waiting: bool = False  # :func:`note_waiting` said why the workers wait
    plugin_files: dict[str, str] = field(default_factory=dict)  # the plugins' code the sweep started with

    def asks(self) -> bool:
        """Whether a worker may ask the sampler for a new trial: not once trials keep failing (an
        objective the runs never log would otherwise launch trials without end)."""
        return self.failed_in_a_row < MAX_FAILED_IN_A_ROW

    def stopping(self) -> str | None:
        """Why the sweep is stopping (what its stopped trials record), or None. A SIGTERM counts from its
        handler on, before the main thread sets ``stop``: under a job-wide SIGTERM (``scancel``) a tiny trial
        can checkpoint and end first, and its retry must still be queued."""
        if self.stop.is_set():
            return self.stop_error
        return TERMINATED if self.sigterm is not None and self.sigterm.count else None


def threads_per_trial(workers: int, base_threads: int) -> int | None:
    """cores // workers, at most the user's ``OMP_NUM_THREADS``, unless the experiment pins
    ``trainer.num_threads`` itself (then None)."""
    return None if base_threads else auto_threads(workers)


def run_workers(ctx: WorkerContext) -> None:
    """Run ``ctx.workers`` worker threads until the study has no work left (or ``ctx.stop``).

    Ctrl-C (KeyboardInterrupt, re-raised): stop the workers, SIGKILL their trial processes and wait for
    the workers to record them (in the study, and as interrupted in their runs' ``run.json``) and return,
    so the process never exits with a worker inside a storage call. Each worker sets an event when it
    returns: a ``Thread.join`` that Ctrl-C interrupted leaves the thread looking finished while it still
    runs (Python < 3.13). SIGTERM (:class:`SweepTerminated`, once the trials stopped): the same, except that
    the trials are sent SIGTERM, to stop at a checkpoint, and get a grace period (``terminate.py``).
    """
    reset_stop()  # an earlier Ctrl-C in this process (a notebook's rerun) must not kill these trials
    grace = grace_s()
    done = [threading.Event() for _ in range(ctx.workers)]
    with noting_sigterm() as noted:
        ctx.sigterm = noted
        for i in range(ctx.workers):
            threading.Thread(target=_worker_main, args=(ctx, i, done[i]), name=f"sweep-worker-{i}",
                             daemon=True).start()
        try:
            for event in done:
                while not event.wait(0.5) and not noted.count:
                    pass
            if noted.count:  # (also one that came as the last worker returned: the sweep was told to stop)
                stop_on_sigterm(ctx, done, noted, grace)
                raise SweepTerminated
        except KeyboardInterrupt:  # (also during a SIGTERM's grace: its trials are killed, their retries queued)
            ctx.stop.set()
            kill_all()
            wait_for_workers(ctx, done, KILL_WAIT_S)
            raise


def _worker_main(ctx: WorkerContext, index: int, done: threading.Event) -> None:
    try:
        worker_loop(ctx, index)
    except Exception as exc:  # noqa: BLE001 - report, let the other workers continue
        ctx.log(f"[worker {index}] stopped on error: {type(exc).__name__}: {exc}")
    finally:
        done.set()


def worker_loop(ctx: WorkerContext, index: int) -> None:
    """Claim and run trials until none is left (or a run lacked the objective: the others would too)."""
    study = open_study(ctx.spec, ctx.url, create=False)
    lock = StudyLock(ctx.url, ctx.spec.name)
    while not ctx.stopping() and ctx.no_objective is None:
        fail_stale(study, lock)
        trial_id = take_trial(study, ctx.spec, lock, ask=ctx.asks(), mine=ctx.running)
        if trial_id is None:
            if SUCCESSOR_ATTR in study.user_attrs:  # the grid was widened: its work moved to a copy
                study = current_study(study)
                continue
            if count(study, (TrialState.RUNNING, TrialState.WAITING)) == 0:
                return
            note_waiting(ctx, study, lock)
            ctx.stop.wait(ctx.poll_s)
            continue
        state = run_trial(ctx, study, trial_id, index, lock)
        ctx.failed_in_a_row = 0 if state in (TrialState.COMPLETE, TrialState.PRUNED) else ctx.failed_in_a_row + 1
        if ctx.spec.sampler != "grid" and not ctx.asks():
            ctx.log(f"[worker {index}] {ctx.failed_in_a_row} trials failed in a row: no new trials are asked for; "
                    "see the trial logs")


def note_waiting(ctx: WorkerContext, study: optuna.Study, lock: StudyLock) -> None:
    """Say once why the workers wait with nothing to claim: trials another process marked running. Rerun
    after a ``kill -9``, the killed trial waits until its heartbeat is old enough to count as dead. Read under
    the claims' lock, which also records this process's claims in ``ctx.running`` (``take_trial``)."""
    if ctx.told_waiting:
        return
    with lock.hold():
        others = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                  if t._trial_id not in ctx.running]
    if others and not ctx.told_waiting:
        ctx.told_waiting = True
        ctx.log(f"sweep {ctx.spec.name}: waiting on trial(s) {', '.join(map(str, others))}, marked running by "
                "another process: a live worker finishes them; if it died (a kill -9), they are failed and "
                f"retried here once their heartbeat is {2 * ctx.spec.heartbeat_interval:g} s old")


def run_trial(ctx: WorkerContext, study: optuna.Study, trial_id: int, index: int, lock: StudyLock) -> TrialState:
    """Run one claimed trial in a child process; return its final state.

    A thread records the trial's heartbeat from the claim to the end, so a slow start (composing
    the config, the forkserver still importing) never looks like a dead worker to the others.
    """
    try:  # take_trial recorded the claim in ctx.running
        with beating(study._storage, trial_id, ctx.spec.heartbeat_interval):
            return _run_claimed(ctx, study, trial_id, index, lock)
    finally:
        ctx.running.discard(trial_id)


def _run_claimed(ctx: WorkerContext, study: optuna.Study, trial_id: int, index: int, lock: StudyLock) -> TrialState:
    storage = study._storage  # public storage API behind the study
    trial = claimed_trial(study, trial_id, ctx.spec)
    try:  # tpe/random under the study's lock: two workers drawing one arm at once took the same seed
        with lock.hold() if ctx.spec.sampler != "grid" else nullcontext():
            values, seed, label = trial_values(trial, ctx.spec)
    except ValueError as exc:  # Optuna refused the parameters: fail the trial rather than leave it RUNNING
        trial.set_user_attr("error", str(exc))
        storage.set_trial_state_values(trial_id, TrialState.FAIL)
        ctx.log(f"[worker {index}] trial {trial.number}: parameters refused: {exc}")
        return TrialState.FAIL
    stem = job_stem(ctx.spec.sweep_dir, trial.number)
    stem.parent.mkdir(parents=True, exist_ok=True)
    job_path, log_path = stem.with_suffix(".json"), stem.with_suffix(".log")
    trial.set_user_attr("log", str(log_path.resolve()))
    try:
        with _COMPOSE_LOCK:
            layer = trial_layer(ctx.spec, values, seed, trial.number, ctx.threads, label)
            cfg = ctx.spec.compose([layer])
        check_plugins_unchanged(ctx.plugin_files, cfg)
    except ConfigError as exc:
        trial.set_user_attr("error", str(exc))
        trial.set_user_attr(CONFIG_ERROR_ATTR, True)
        storage.set_trial_state_values(trial_id, TrialState.FAIL)
        progress = f"; {ctx.progress.record(study, TrialState.FAIL, 0.0)}" if ctx.progress else ""
        ctx.log(f"[worker {index}] trial {trial.number} {label} seed={seed}: config error: {exc}{progress}")
        return TrialState.FAIL
    job = _job(ctx, trial, cfg)
    with _COMPOSE_LOCK:  # composes the killed run's saved config
        job["resume"] = resumable_run(study, ctx.spec, trial_id, cfg)
    job_path.write_text(json.dumps(job, indent=1, default=str))
    resuming = f", resuming {job['resume']}" if job["resume"] else ""
    ctx.log(f"[worker {index}] trial {trial.number} {label} seed={seed}: started (log {log_path}){resuming}")
    started = time.time()
    outcome, process = _run_process(ctx, cfg, job_path, log_path)
    final = storage.get_trial(trial_id)
    stopping = ctx.stopping()  # Ctrl-C or SIGTERM: the trial may have failed itself (a SIGTERM'd one does)
    if stopping and process is not None:  # SIGKILLed, the trial could not record its run as interrupted
        mark_interrupted(ctx.spec.runs_dir, *process, error=stopping)
    if final.state == TrialState.RUNNING:  # the child died without telling Optuna (OOM, kill, Ctrl-C)
        trial.set_user_attr("error", stopping or outcome)
        storage.set_trial_state_values(trial_id, TrialState.FAIL)
        final = storage.get_trial(trial_id)
    _mark_superseded(ctx, study, trial_id, index)
    if stopping and final.state == TrialState.FAIL:
        ctx.log(f"[worker {index}] trial {trial.number}: {_stopped(stopping)}; " + (
            "its retry is queued: rerun the sweep to continue it" if queue_retry(study, final)
            else "rerun the sweep to start it again"))
    elif final.state == TrialState.FAIL and final.user_attrs.get(TRANSIENT_ATTR):
        with StudyLock(ctx.url, ctx.spec.name).hold():  # held back before any worker can take it
            retry = queue_retry(study, final)
            delay = hold_retry(study, retry, ctx.spec.retry_delay_s) if retry else None
        ctx.log(f"[worker {index}] trial {trial.number}: a download failed on the network; " + (
            f"retrying it in {delay:g} s" if retry else "no retry left: rerun the sweep once the hub answers"))
    if final.state == TrialState.FAIL and final.user_attrs.get(NO_OBJECTIVE_ATTR):
        ctx.no_objective = f"trial {trial.number}: {final.user_attrs.get('error', '')}"
    shown = (f"{ctx.spec.metric}={final.value:.4g}" if final.value is not None
             else final.user_attrs.get("error", ""))
    seconds = time.time() - started
    progress = f"; {ctx.progress.record(study, final.state, seconds, final.datetime_complete)}" if ctx.progress else ""
    ctx.log(f"[worker {index}] trial {trial.number} {label} seed={seed}: {final.state.name} {shown} "
            f"({seconds:.1f}s){progress}")
    return final.state


def _mark_superseded(ctx: WorkerContext, study: optuna.Study, trial_id: int, index: int) -> None:
    """Record the point's runs that a retry started over elsewhere as superseded (``klear-lab runs`` showed
    them stopped, for a rerun that has nothing left to do, or failed, to be fixed and rerun). After the
    trial, whose run directory is known only once its run started (``record.RecordRunDir``); a run left
    behind by a sweep killed during the retry that started over, or by an attempt killed before it recorded
    its run (``retry.unrecorded_runs``), is caught by the point's next attempt."""
    for old, new, number in superseded_runs(study, ctx.spec, trial_id):
        if mark_superseded(old, new, number):
            ctx.log(f"[worker {index}] {old}: superseded by trial {number}'s run {new} (its retry started over)")


def _run_process(ctx: WorkerContext, cfg: dict[str, Any], job_path: Path, log_path: Path,
                 ) -> tuple[str, tuple[int, int | None] | None]:
    """Run a trial's process to its end: (what became of it, its pid and start time; None when none started)."""
    if ctx.stopping():  # Ctrl-C or SIGTERM before it started: nothing to stop
        return "not started: the sweep was stopping", None
    try:
        code, process = run_trial_process(ctx.spec, cfg, job_path, log_path, trial_env(ctx.threads, ctx.workers))
    except (OSError, EOFError) as exc:  # no process: fork/exec failed, or the preloaded server died
        return f"could not start the trial process ({ctx.spec.trial_start}): {type(exc).__name__}: {exc}", None
    return f"trial process exited with code {code}; see {log_path}", process


def _stopped(why: str) -> str:
    return "killed" if why == INTERRUPTED else f"stopped, {why}"


def _job(ctx: WorkerContext, trial: optuna.trial.Trial, cfg: dict[str, Any]) -> dict[str, Any]:
    spec = ctx.spec
    return {"storage": ctx.url, "study": trial.study.study_name, "trial_id": trial._trial_id, "number": trial.number,
            "spec": str(ctx.frozen_spec.resolve()), "runner": spec.runner, "objective": spec.metric,
            "metrics": spec.metrics, "pruner": spec.pruner, "pruner_startup": len(spec.seeds),
            "config": cfg}


def trial_env(threads: int | None, workers: int) -> dict[str, str]:
    """Child environment: one share of the cores per trial, the sweep's pid (the trial dies with it).

    Without ``WANDB_SERVICE``: W&B exports it in a process that started a run, and a trial that inherits
    it logs through that process's W&B service, which a killed trial's run keeps "in use" (its retry,
    resuming the same run id, would be refused). Each trial starts its own.
    """
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    env.update({"KLEAR_PARALLEL_WORKERS": str(workers), "KLEAR_SWEEP_PID": str(os.getpid()), "PYTHONUNBUFFERED": "1"})
    if threads:
        # RAYON: the Rust thread pool of `tokenizers` (tokenizer training, batch encoding)
        env.update({k: str(threads) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS")})
    return env
