"""Train a sweep's shared starting point (``model.init_from``) once, on every core, before the workers.

Each trial would train a missing parent itself (under a file lock, so only once), but at
``cores // workers`` threads while the other workers sit blocked on that lock: on 2 cores the
quickstart SFT took about 370 s that way. Trained here first, in its own process with all cores,
the trials then find it by config hash (threads and output dir are not part of the hash).
Skipped when an axis changes the parent, for custom runners, and when there is no ``init_from``.
A starting point another sweep under the same ``out_dir`` already trained with the same config
and seed is shared (hard-linked) instead of retrained (``share_sibling_start``): the embedded RL
ablation sweeps all start from the quickstart SFT model. A lock per starting point in ``out_dir``
makes a sweep started while another trains it wait and share it, rather than train it again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from klear_lab.config.compose import compose
from klear_lab.errors import DataError, KlearError, TransientError
from klear_lab.file_lock import exclusive_lock
from klear_lab.sweep.spec import DEFAULT_RUNNER, SweepSpec

PARENT_KEYS = ("model.init_from", "model.name_or_path")


class ParentRunError(KlearError):
    """The shared starting point could not be trained; no trial was started."""

    exit_code = 1


def needs_parent(spec: SweepSpec, base: dict[str, Any]) -> bool:
    """True when every trial starts from the same ``init_from`` of ``base`` (the composed experiment)."""
    if spec.runner != DEFAULT_RUNNER or any(a.key in PARENT_KEYS for a in spec.axes):
        return False
    return bool(base["model"]["init_from"]) and not base["model"]["name_or_path"]


def train_parent(spec: SweepSpec, base: dict[str, Any], threads: int, log: Any = print) -> None:
    """Share or train the parent run (training in a child process); a failure stops the sweep
    before any trial."""
    if not needs_parent(spec, base):
        return
    cfg = {**base, "run": {**base["run"], "out_dir": str(spec.runs_dir)}}
    with _start_lock(cfg, lambda: log(f"sweep {spec.name}: starting point: waiting for another sweep "
                                      "training the same one, to share it")):
        done, stale = trained_start(cfg)
        if stale is not None:  # what it does instead follows: shares another sweep's, or trains one
            log(f"sweep {spec.name}: starting point: {stale}")
        if done is not None:  # a rerun of the sweep: the parent's process would only find it
            log(f"sweep {spec.name}: starting point: {done} (trained before)")
            return
        shared = share_sibling_start(cfg)
        if shared is not None:
            log(f"sweep {spec.name}: starting point: reusing {shared} (same config and seed, trained by another sweep)")
            return
        _train(spec, threads, log)


@contextlib.contextmanager
def _start_lock(cfg: dict[str, Any], on_wait: Any) -> Iterator[None]:
    """An exclusive lock on one starting point (config hash and seed) for every sweep under ``out_dir``:
    a sweep started while another trains it waits (``on_wait`` says so), then shares it."""
    from klear_lab import starting_point
    from klear_lab.tracking import config_hash, out_dir_of

    parent = starting_point.parent_config(cfg)
    out_dir = out_dir_of(cfg).parent.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(out_dir / f".start-{config_hash(parent)}-s{parent['run']['seed']}.lock", on_wait):
        yield


def _train(spec: SweepSpec, threads: int, log: Any) -> None:
    log_path = spec.sweep_dir / "parent.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "klear_lab.sweep.parents", str(spec.experiment), str(spec.runs_dir), str(threads),
           *spec.absolute_overrides()]  # the child runs in this directory: a spec's own paths are the spec's
    log(f"sweep {spec.name}: starting point (model.init_from) on {threads} thread(s), log {log_path}")
    started = time.time()
    with open(log_path, "ab") as out:
        code, terminated = _run_passing_sigterm(cmd, out)
    if terminated:  # stopped at a checkpoint (or finished meanwhile): no trial starts, a rerun resumes it
        from klear_lab.sweep.terminate import SweepTerminated

        log(f"sweep {spec.name}: starting point stopped by SIGTERM (exit {code}; see {log_path})")
        raise SweepTerminated
    if code == TransientError.exit_code:
        raise ParentRunError(f"{spec.path}: training the starting point of {spec.experiment}: a download "
                             f"failed on the network (exit {code}; see {log_path}): rerun the sweep when the hub "
                             "answers")
    if code != 0:
        raise ParentRunError(f"{spec.path}: training the starting point of {spec.experiment} failed "
                          f"(exit {code}); see {log_path}")
    log(f"sweep {spec.name}: starting point ready in {time.time() - started:.1f}s")


def _run_passing_sigterm(cmd: list[str], out: Any) -> tuple[int, bool]:
    """Run the starting point's training; the exit code, and whether a SIGTERM reached the sweep meanwhile. A
    SIGTERM (a preemption: `docker stop`, Kubernetes, signal the sweep alone) is passed on: the training stops at
    its step's end with a checkpoint, as `klear-lab train` does, and is waited for; a second one kills it. It
    went on training, orphaned, when the sweep exited 143 at once (a review). Ctrl-C kills it, as a trial."""
    proc: subprocess.Popen | None = None
    received = 0

    def forward(signum: int, frame: Any) -> None:
        nonlocal received
        received += 1
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM if received == 1 else signal.SIGKILL)

    installed = True
    try:  # before the child starts: a SIGTERM while it forks would kill the sweep and leave it running
        previous = signal.signal(signal.SIGTERM, forward)
    except ValueError:  # not the main thread (an API caller's): its SIGTERM handling stays
        installed = False
    try:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        if received:  # it came while the child started
            proc.send_signal(signal.SIGTERM)
        code = proc.wait()
    except BaseException:
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):  # what subprocess.run gave it after a Ctrl-C
                proc.wait(timeout=0.25)
            proc.kill()
            proc.wait()
        raise
    finally:
        if installed:  # None: a handler not set from Python, which Python cannot put back; the default then
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
    return code, received > 0  # read once the handler is restored: one that came meanwhile counts


def trained_start(cfg: dict[str, Any]) -> tuple[Path | None, str | None]:
    """This sweep's completed starting point trained on today's records, and a note on a newer one trained on
    other records (``starting_point.completed_parent``)."""
    from klear_lab import starting_point
    from klear_lab.tracking import config_hash

    parent = starting_point.parent_config(cfg)
    return starting_point.completed_parent(parent, config_hash(parent))


def share_sibling_start(cfg: dict[str, Any]) -> Path | None:
    """Bring a completed starting point with the same config hash and seed from another sweep under
    the same ``out_dir`` (``sweep_runs/*/runs``) into this sweep's runs dir, so it is not trained again.

    The copy is made of hard links (no extra disk; a plain copy across file systems), so it
    stays valid if the other sweep is deleted, and every trial of this sweep keeps the same
    starting point. Trials then find it by hash as usual. Returns the source, or None.
    """
    from klear_lab import starting_point
    from klear_lab.tracking import config_hash, out_dir_of

    runs = out_dir_of(cfg)
    parent = starting_point.parent_config(cfg)
    wanted, seed = config_hash(parent), parent["run"]["seed"]
    if starting_point.completed_parent(parent, wanted)[0] is not None:
        return None
    siblings = [other for other in runs.parent.parent.glob("*/runs") if other.resolve() != runs.resolve()
                and starting_point.find_completed_run(other, wanted, seed) is not None]
    data = None  # a run trained on other contents of a data file is no match; unreadable data: not checked
    if siblings:
        with contextlib.suppress(DataError):
            data = starting_point.records_digests(parent)
    found = [run for other in siblings
             for run in [starting_point.find_completed_run(other, wanted, seed, data=data)] if run is not None]
    if not found:
        return None
    source = max(found, key=lambda p: p.stat().st_mtime)
    runs.mkdir(parents=True, exist_ok=True)
    tmp = runs / f".sharing-{source.name}-{os.getpid()}"
    try:
        shutil.copytree(source, tmp, copy_function=_link_or_copy, symlinks=True)
        os.rename(tmp, runs / source.name)  # atomic: trials never see half a copy
    except OSError:
        if starting_point.find_completed_run(runs, wanted, seed) is None:  # not a lost race with another sweep
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return source


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def main(argv: list[str]) -> int:
    """``python -m klear_lab.sweep.parents EXPERIMENT RUNS_DIR THREADS [override ...]``."""
    from klear_lab import starting_point

    experiment, runs, threads, *overrides = argv
    cfg = compose(experiment, overrides)
    cfg["run"]["out_dir"] = runs
    cfg["trainer"]["num_threads"] = int(threads)  # the parent run takes its threads from here
    starting_point.resolve_init_from(cfg)
    print(f"starting point: {cfg['model']['name_or_path']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
