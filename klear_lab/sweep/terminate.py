"""SIGTERM of ``klear-lab sweep`` (preemption: ``scancel``, ``docker stop``, Kubernetes): the running trials stop
as a SIGTERM'd ``klear-lab train`` does, at their step's end with a checkpoint, and their retries are queued.

The default handler ended the sweep process at once, and each trial's pidfd watcher (``trial.die_with``)
SIGKILLed the trial with it: no checkpoint, the study's trials left RUNNING and their runs "running". Now
``worker.run_workers`` only notes the signal (:func:`noting_sigterm`) and its main thread, between waits (a
handler that raised could leave a storage call half done), calls :func:`stop_on_sigterm`: the workers stop
taking trials, each running trial process is sent SIGTERM (it checkpoints, records its run "terminated
(SIGTERM)" and fails its trial: ``trial.run_job``), and the workers record them (failed, retry queued, as
after a Ctrl-C) within ``KLEAR_SWEEP_TERM_GRACE_S`` seconds. Then, or at a second SIGTERM, what is left is
SIGKILLed. A scheduler's own grace (Kubernetes 30 s, ``docker stop`` 10 s, Slurm's KillWait) usually ends
first with a SIGKILL of the sweep; the trials then die with it (``die_with``), as before.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from klear_lab.errors import ConfigError
from klear_lab.sweep import launcher
from klear_lab.sweep.trial import TERMINATED

GRACE_ENV = "KLEAR_SWEEP_TERM_GRACE_S"
DEFAULT_GRACE_S = 120.0
KILL_WAIT_S = 20.0  # after a SIGKILL (Ctrl-C too): how long the workers get to record their trials and return


class SweepTerminated(Exception):
    """Raised by ``run_workers`` once a SIGTERM stopped its workers and their trials (the sweep exits 143)."""


class SigtermNoted:
    """The sweep's SIGTERM handler while its workers run: counts the signals; the main thread acts on them."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, signum: int, frame: Any) -> None:
        self.count += 1


@contextmanager
def noting_sigterm() -> Iterator[SigtermNoted]:
    """Count SIGTERMs (instead of dying) in the block; the handler before it is put back at its end. Not from
    another thread than the main one (only it sets handlers), nor over SIG_IGN or a handler set outside Python."""
    noted = SigtermNoted()
    previous = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
    if previous is None or previous == signal.SIG_IGN:
        yield noted
        return
    signal.signal(signal.SIGTERM, noted)
    try:
        yield noted
    finally:
        signal.signal(signal.SIGTERM, previous)


def grace_s() -> float:
    """``KLEAR_SWEEP_TERM_GRACE_S`` (default 120): how long a SIGTERM'd sweep waits for its trials to stop.
    Read when the workers start, so that a bad value is an error then, not at the signal."""
    raw = os.environ.get(GRACE_ENV, "").strip()
    try:
        value = float(raw) if raw else DEFAULT_GRACE_S
    except ValueError:
        value = -1.0
    if not value >= 0:  # (NaN too)
        raise ConfigError(f"{GRACE_ENV}={raw!r}: must be a number of seconds >= 0 (default {DEFAULT_GRACE_S:g})")
    return value


def stop_on_sigterm(ctx: Any, done: list[threading.Event], noted: SigtermNoted, grace: float) -> None:
    """Stop the workers of ``ctx`` (``worker.WorkerContext``) and their trials after a SIGTERM (see the module
    docstring); return once every worker has recorded its trial and returned, or given up on the late ones."""
    ctx.stop_error = TERMINATED
    ctx.stop.set()
    sent: set[int] = set()
    running = forward_sigterm(sent)
    ctx.log(f"SIGTERM: no new trials; {running} running trial(s) told to stop at their next step's end with a "
            f"checkpoint (waiting up to {grace:g}s, {GRACE_ENV}; a second SIGTERM kills them)")
    deadline = time.time() + grace
    while not all(event.is_set() for event in done):
        if noted.count > 1 or time.time() >= deadline:
            launcher.kill_all()
            why = "a second SIGTERM" if noted.count > 1 else f"still running {grace:g}s after the SIGTERM ({GRACE_ENV})"
            ctx.log(f"{why}: trial processes killed (their steps since their last checkpoint are lost)")
            wait_for_workers(ctx, done, KILL_WAIT_S)
            return
        forward_sigterm(sent)  # a trial process a worker was starting as the signal came
        time.sleep(0.2)


def forward_sigterm(sent: set[int]) -> int:
    """SIGTERM each trial process of this sweep process not yet sent one (their pids are added to ``sent``);
    returns how many are running."""
    pids = launcher.live_pids()
    for pid in pids:
        if pid not in sent:
            sent.add(pid)
            with contextlib.suppress(ProcessLookupError):  # exited meanwhile (still in _LIVE until reaped)
                os.kill(pid, signal.SIGTERM)
    return len(pids)


def wait_for_workers(ctx: Any, done: list[threading.Event], seconds: float) -> None:
    """Wait up to ``seconds`` for the workers to return; name those still busy."""
    deadline = time.time() + seconds
    for event in done:
        event.wait(max(0.0, deadline - time.time()))
    late = [i for i, event in enumerate(done) if not event.is_set()]
    if late:
        ctx.log(f"worker(s) {late} still busy after {seconds:.0f}s: their trials are retried once their "
                "heartbeats are stale")
