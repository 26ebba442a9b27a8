"""Start one trial process: forked from a preloaded server, or a fresh interpreter.

A fresh ``python -m klear_lab.sweep.trial`` imports torch, Lightning, transformers, W&B and
Optuna before its first step: ~8 s of a 15 s tiny trial on the 2-core CPU (measured), paid by
every trial. With ``trial_start: preloaded`` (the default) the sweep process starts
multiprocessing's own forkserver once, which imports those modules, and every trial is forked
from it: still one process per trial (a crash or OOM kills that trial only), with its own
environment, working directory, log file and torch threads, but without the import bill.

Trials that use more than one device start fresh: Lightning's DDP launcher re-executes the
command line of the process it runs in, which only a fresh ``python -m`` trial has.
"""

from __future__ import annotations

import contextlib
import getpass
import multiprocessing
import multiprocessing.forkserver
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from multiprocessing import resource_tracker
from pathlib import Path
from typing import Any, Protocol

from klear_lab.run_owner import process_start
from klear_lab.sweep.spec import DEFAULT_RUNNER, SweepSpec
from klear_lab.sweep.trial import SERVER_BLOCKED, forked_main

# every trial builds Lightning callbacks (record.py, pruning.py), whatever its runner: Lightning and torch
# are imported by every trial, so they are imported here once (5 s per trial on the 2-core CPU otherwise)
PRELOAD_BASE = ["optuna", "klear_lab.sweep.trial", "klear_lab.sweep.record", "klear_lab.sweep.pruning"]
PRELOAD_RUN = [*PRELOAD_BASE, "torch", "lightning", "transformers", "wandb", "wandb.sdk.launch",
               "klear_lab.models.tokenizer", "klear_lab.run", "klear_lab.stages.sft", "klear_lab.stages.rl"]
_LOCK = threading.Lock()
_CONTEXT: Any = None
_LIVE: set[Any] = set()  # trial processes running now (for kill_all)
_LIVE_LOCK = threading.Lock()
_TEMP_PREFIX = "klear-trial-"  # + the sweep's pid: a trial's own temporary directory (_own_temp_dir)
_STOPPED = threading.Event()  # kill_all ran: a trial process started from now on is killed at once


class TrialProcess(Protocol):
    pid: int  # the trial's process (its run's run.json names it)

    def wait(self) -> int:
        """Wait for the trial process to exit; its exit code (negative: killed by that signal)."""

    def kill(self) -> None:
        """SIGKILL the trial (the worker records it in the storage)."""


class _Fresh:
    def __init__(self, job_path: Path, log_path: Path, env: dict[str, str]) -> None:
        cmd = [sys.executable, "-m", "klear_lab.sweep.trial", str(job_path)]
        with open(log_path, "ab") as log:
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.pid = self._proc.pid

    def wait(self) -> int:
        return self._proc.wait()

    def kill(self) -> None:
        self._proc.kill()


class _Forked:
    def __init__(self, job_path: Path, log_path: Path, env: dict[str, str], runner: str) -> None:
        # not a daemon: a trial may start processes of its own (DataLoader workers, sandboxes)
        args = (str(job_path), str(log_path), env, os.getcwd())
        self._proc = forkserver(runner).Process(target=forked_main, args=args, name=f"trial-{job_path.stem}",
                                                daemon=False)
        self._proc.start()
        self.pid = self._proc.pid

    def wait(self) -> int:
        self._proc.join()
        return self._proc.exitcode

    def kill(self) -> None:
        self._proc.kill()


def warm_up(mode: str, runner: str) -> None:
    """Start the preloaded server now, so its imports overlap the study setup and the parent run; remove the
    trial temporary directories of sweep processes that were killed (``kill -9``) before they could."""
    remove_orphaned_temp_dirs()
    if mode == "preloaded":
        forkserver(runner)


def remove_orphaned_temp_dirs() -> None:
    """Remove ``klear-trial-PID-*`` directories (:func:`_own_temp_dir`) whose sweep process ``PID`` is gone."""
    for temp in Path(tempfile.gettempdir()).glob(f"{_TEMP_PREFIX}*-*"):
        pid = temp.name[len(_TEMP_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and process_start(int(pid)) is None:  # no such process
            shutil.rmtree(temp, ignore_errors=True)


def live_pids() -> list[int]:
    """The pids of the trial processes this sweep process started that have not been waited for yet."""
    with _LIVE_LOCK:
        return [proc.pid for proc in _LIVE]


def kill_all() -> None:
    """SIGKILL every trial process this sweep process started and that still runs, and any that a
    worker is starting right now (Ctrl-C)."""
    _STOPPED.set()
    with _LIVE_LOCK:
        live = list(_LIVE)
    for proc in live:
        proc.kill()


def reset_stop() -> None:
    """Allow trial processes again after a :func:`kill_all` (a new sweep in the same process)."""
    _STOPPED.clear()


def forkserver(runner: str) -> Any:
    """multiprocessing's forkserver context, its modules preloaded (the server starts on first use).

    ``run_experiment`` trials get the whole training stack; custom runners what every trial imports
    (Optuna, Lightning for the trial's callbacks), not transformers or W&B. One server per process: the
    first call's runner decides.
    """
    global _CONTEXT
    with _LOCK:
        if _CONTEXT is None:
            _CONTEXT = multiprocessing.get_context("forkserver")
            _CONTEXT.set_forkserver_preload(PRELOAD_RUN if runner == DEFAULT_RUNNER else PRELOAD_BASE)
        resource_tracker.ensure_running()  # first: starting its process unblocks SIGTERM in this thread
        with sigterm_blocked():  # the server started here (or again, if it died), not by a Process.start
            multiprocessing.forkserver.ensure_running()
        return _CONTEXT


@contextlib.contextmanager
def sigterm_blocked() -> Iterator[None]:
    """SIGTERM blocked in this thread while it starts the preloaded server, which keeps the mask: ``scancel``
    signals every process of the job, and a server it ended took with it the news of how its forked trials
    ended (the workers saw them fail at once; the sweep exited and killed them before their checkpoints).
    Each forked trial unblocks it (``trial.forked_main``); the server ends when the sweep process does.
    SIGINT too: a Ctrl-C while the server still imports its modules printed their ~40-line traceback (it
    ignores SIGINT only once they are imported, which discards the blocked one); the sweep says what happened."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, SERVER_BLOCKED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def needs_fresh(cfg: dict[str, Any]) -> bool:
    """True for trials Lightning may relaunch (several devices or an explicit distributed strategy)."""
    trainer = cfg.get("trainer") or {}
    devices = trainer.get("devices", 1)
    strategy = str(trainer.get("strategy", "auto"))
    return devices not in (1, "1", [0]) or strategy not in ("auto", "single_device")


def run_trial_process(spec: SweepSpec, cfg: dict[str, Any], job_path: Path, log_path: Path,
                      env: dict[str, str]) -> tuple[int, tuple[int, int | None]]:
    """Run the trial of ``job_path`` (config ``cfg``), output appended to ``log_path``; its exit code, and
    its pid and start time (``run_owner.process_start``: what its run's ``run.json`` records of its writer)."""
    proc: TrialProcess
    with _own_temp_dir() as temp:
        env = {"TORCHINDUCTOR_CACHE_DIR": _compile_cache_dir(), **env, "TMPDIR": temp}
        if spec.trial_start == "fresh" or needs_fresh(cfg):
            proc = _Fresh(job_path.resolve(), log_path, env)
        else:
            proc = _Forked(job_path.resolve(), log_path.resolve(), env, spec.runner)
        with _LIVE_LOCK:
            _LIVE.add(proc)
        try:
            if _STOPPED.is_set():  # started while kill_all ran, after it looked
                proc.kill()
            started = process_start(proc.pid)  # not reaped before wait(): still this process
            return proc.wait(), (proc.pid, started)
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(proc)


def _compile_cache_dir() -> str:
    """torch.compile's cache as torch places it by default (``torch._inductor.runtime.cache_dir_utils``), under
    the sweep's temporary directory, not the trial's own: kept across trials, which compile the same model
    (16 s cold, 3 s warm for a small one here), as it was before each trial had its own ``TMPDIR``."""
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        user = f"uid_{os.getuid()}"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


@contextlib.contextmanager
def _own_temp_dir() -> Iterator[str]:
    """A temporary directory for one trial process (its ``TMPDIR``), removed once the process ended.

    A forked trial ends with ``os._exit`` (multiprocessing's), which skips the interpreter's exit, whose
    finalizers remove the temporary directories W&B writes each logged table in: every trial left one in
    ``/tmp`` (``tmpXXXX/rollout/samples.table.json``), and so does any trial killed. W&B's staged copy of the
    table, which ``wandb sync`` uploads, is elsewhere (``WANDB_DATA_DIR``) and stays. A sweep process killed
    itself leaves these; the next sweep started on this machine removes them (:func:`warm_up`)."""
    temp = tempfile.mkdtemp(prefix=f"{_TEMP_PREFIX}{os.getpid()}-")  # the sweep's pid: see remove_orphaned_temp_dirs
    try:
        yield temp
    finally:
        shutil.rmtree(temp, ignore_errors=True)
