"""Train a sweep's shared starting point (``model.init_from``) once, on every core, before the workers.

Each trial would train a missing parent itself (under a file lock, so only once), but at
``cores // workers`` threads while the other workers sit blocked on that lock: on 2 cores the
quickstart SFT took about 370 s that way. Trained here first, in its own process with all cores,
the trials then find it by config hash (threads and output dir are not part of the hash).
Skipped when an axis changes the parent, for custom runners, and when there is no ``init_from``.
A starting point another sweep under the same ``out_dir`` already trained with the same config
and seed is shared (hard-linked) instead of retrained (``share_sibling_start``): the embedded RL
ablation sweeps all start from the quickstart SFT model. Else one a ``klear-lab train`` completed in
the ``run.out_dir`` beside ``out_dir`` (``runs`` beside ``sweep_runs``) is shared the same way
(``share_train_start``). A lock per starting point in ``out_dir`` makes a sweep started while another
trains it wait and share it, rather than train it again; a ``klear-lab train`` outside the sweeps shares
theirs the same way (:mod:`klear_lab.start_sharing`).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from klear_lab.config.compose import compose
from klear_lab.errors import KlearError, TransientError
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
    with _start_locks(spec, cfg, log):
        done, stale = trained_start(cfg)
        if stale is not None:  # what it does instead follows: shares another sweep's, or trains one
            log(f"sweep {spec.name}: starting point: {stale}")
        if done is not None:  # a rerun of the sweep: the parent's process would only find it
            log(f"sweep {spec.name}: starting point: {done} (trained before)")
            return
        if not _share_start(spec, cfg, log):
            _train(spec, cfg, threads, log)


def planned_start(spec: SweepSpec, base: dict[str, Any]) -> str | None:
    """What running the sweep would do for its starting point, as :func:`train_parent` decides it, looked up
    without the lock and linking nothing (``--validate-only``); None for a sweep without one."""
    from klear_lab import starting_point
    from klear_lab.start_sharing import find_completed_start, train_runs
    from klear_lab.tracking import config_hash, out_dir_of

    if not needs_parent(spec, base):
        return None
    cfg = {**base, "run": {**base["run"], "out_dir": str(spec.runs_dir)}}
    parent = starting_point.parent_config(cfg)
    wanted, runs = config_hash(parent), spec.runs_dir.resolve()
    if (done := starting_point.completed_parent(parent, wanted)[0]) is not None:  # trained_start, composed once
        return f"{done} (trained before)"
    siblings = [d for d in runs.parent.parent.glob("*/runs") if d.resolve() != runs]
    if (shared := find_completed_start(parent, wanted, siblings)) is not None:
        return f"reuses {shared} (trained by another sweep)"
    trains = train_runs(cfg["model"]["init_from"], runs.parent.parent)
    if trains is not None and (taken := find_completed_start(parent, wanted, [trains])) is not None:
        return f"reuses {taken} (trained by `klear-lab train`)"
    if (stopped := starting_point.find_resumable_run(out_dir_of(parent), wanted, parent["run"]["seed"])) is not None:
        return f"continues {stopped} from its last checkpoint"
    return f"trains {cfg['model']['init_from']} (seed {parent['run']['seed']}) first, on every core"


def _share_start(spec: SweepSpec, cfg: dict[str, Any], log: Any) -> bool:
    """Share a completed starting point another sweep trained, else one a ``klear-lab train`` made; say
    which on one line. False when there is none to share."""
    from klear_lab.start_sharing import linked_or_copied

    shared = share_sibling_start(cfg)
    if shared is not None:
        log(f"sweep {spec.name}: starting point: reusing {shared} (same config and seed, trained by another sweep)")
        return True
    taken = share_train_start(cfg)
    if taken is not None:
        source, copy = taken
        log(f"sweep {spec.name}: starting point: reusing {source} (same config and seed, trained by "
            f"`klear-lab train`), {linked_or_copied(source, copy)} into {copy}")
    return taken is not None


@contextlib.contextmanager
def _start_locks(spec: SweepSpec, cfg: dict[str, Any], log: Any) -> Iterator[None]:
    """The locks on one starting point (config hash and seed): the one a ``klear-lab train`` of it takes, where
    the sweep would share its run (``start_sharing.train_lock``), then the one for every sweep under
    ``out_dir``. A sweep started while another sweep or such a train trains it waits (saying so), then shares
    it. Trains take both in the same order: neither waits on the other while holding what it needs. Which one
    holds the first is not known (a sibling sweep takes it too where those runs exist), so its line names both."""
    from klear_lab import starting_point
    from klear_lab.start_sharing import start_lock, train_lock
    from klear_lab.tracking import config_hash, out_dir_of

    parent = starting_point.parent_config(cfg)
    parent_hash, out_dir = config_hash(parent), out_dir_of(cfg).parent.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    with (train_lock(cfg["model"]["init_from"], out_dir, parent_hash, parent["run"]["seed"], lambda: log(
            f"sweep {spec.name}: starting point: waiting for another sweep or a `klear-lab train` training or "
            "sharing the same one, to share it")),
          start_lock(out_dir, parent_hash, parent["run"]["seed"], lambda: log(
              f"sweep {spec.name}: starting point: waiting for another sweep training the same one, to share it"))):
        yield


def _train(spec: SweepSpec, cfg: dict[str, Any], threads: int, log: Any) -> None:
    """Train the starting point of ``cfg`` (the sweep's base, in its runs dir) in a child process."""
    log_path = spec.sweep_dir / "parent.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log(f"sweep {spec.name}: starting point (model.init_from) on {threads} thread(s), log {log_path}")
    started = time.time()
    with open(log_path, "ab") as out:
        try:
            code, terminated = _run_passing_sigterm(_start_command(spec, threads), out)
        except KeyboardInterrupt:  # the child is killed; what the command's own Ctrl-C line leaves out
            log(f"sweep {spec.name}: starting point interrupted (Ctrl-C; see {log_path}): rerun the same command "
                "to resume (it continues from its last checkpoint, if it saved one)")
            raise
    if terminated:
        _stop_after_sigterm(spec, cfg, code, log_path, log)
    if code == TransientError.exit_code:
        raise ParentRunError(f"{spec.path}: training the starting point of {spec.experiment}: a download "
                             f"failed on the network (exit {code}; see {log_path}): rerun the sweep when the hub "
                             "answers")
    if code != 0:
        raise ParentRunError(f"{spec.path}: training the starting point of {spec.experiment} failed "
                          f"(exit {code}); see {log_path}")
    log(f"sweep {spec.name}: starting point ready in {time.time() - started:.1f}s")


def _start_command(spec: SweepSpec, threads: int) -> list[str]:
    """The child process that trains the starting point (:func:`main`), run in this directory: a spec's own
    paths are given as the spec's."""
    return [sys.executable, "-m", "klear_lab.sweep.parents", str(spec.experiment), str(spec.runs_dir), str(threads),
            *spec.absolute_overrides()]


def _stop_after_sigterm(spec: SweepSpec, cfg: dict[str, Any], code: int, log_path: Path, log: Any) -> NoReturn:
    """No trial starts after a SIGTERM; say whether the starting point stopped at a checkpoint or finished
    anyway (its exit code cannot tell: Lightning's ``SIGTERMException`` is a bare ``SystemExit``, exit 0 both
    ways) and raise ``SweepTerminated`` with what a rerun does about it."""
    from klear_lab.sweep.terminate import SweepTerminated

    done, stopped = None, True  # not known: as if stopped at a checkpoint
    with contextlib.suppress(KlearError):
        done, _ = trained_start(cfg)
        stopped = done is None and resumable_start(cfg) is not None
    if done is not None:
        log(f"sweep {spec.name}: starting point completed although a SIGTERM came ({done}; see {log_path})")
        raise SweepTerminated("the starting point completed: the rerun uses it")
    log(f"sweep {spec.name}: starting point stopped by SIGTERM (exit {code}; see {log_path})")
    if not stopped:  # before its first checkpoint: still waiting on the lock, or reading its data
        raise SweepTerminated("the starting point had no checkpoint yet: the rerun trains it from the start, or "
                              "shares the one another sweep completed meanwhile")
    raise SweepTerminated("the starting point continues from its checkpoint")


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


def resumable_start(cfg: dict[str, Any]) -> Path | None:
    """This sweep's starting point stopped at a checkpoint that a rerun continues
    (``starting_point.find_resumable_run``), else None."""
    from klear_lab import starting_point
    from klear_lab.tracking import config_hash, out_dir_of

    parent = starting_point.parent_config(cfg)
    return starting_point.find_resumable_run(out_dir_of(parent), config_hash(parent), parent["run"]["seed"])


def share_sibling_start(cfg: dict[str, Any]) -> Path | None:
    """Bring a completed starting point with the same config hash and seed from another sweep under
    the same ``out_dir`` (``sweep_runs/*/runs``) into this sweep's runs dir, so it is not trained again.

    The copy is made of hard links (:mod:`klear_lab.start_sharing`), so it stays valid if the other
    sweep is deleted, and every trial of this sweep keeps the same starting point. Trials then find it
    by hash as usual. Returns the source, or None.
    """
    from klear_lab import starting_point
    from klear_lab.start_sharing import link_completed_start
    from klear_lab.tracking import config_hash, out_dir_of

    runs = out_dir_of(cfg)
    parent = starting_point.parent_config(cfg)
    wanted = config_hash(parent)
    if starting_point.completed_parent(parent, wanted)[0] is not None:
        return None
    shared = link_completed_start(parent, wanted, runs, runs.parent.parent.glob("*/runs"))
    return None if shared is None else shared[0]


def share_train_start(cfg: dict[str, Any]) -> tuple[Path, Path] | None:
    """Bring the newest completed starting point with the same config hash, seed and records that a
    ``klear-lab train`` made in its ``run.out_dir`` beside this sweep's ``out_dir`` (``start_sharing.train_runs``)
    into this sweep's runs dir, as :func:`share_sibling_start` does a sibling's; for a sweep without one of
    its own, under the lock on it. A run still training is not completed: not taken. Returns (that run,
    its copy), or None."""
    from klear_lab import starting_point
    from klear_lab.start_sharing import link_completed_start, train_runs
    from klear_lab.tracking import config_hash, out_dir_of

    runs = out_dir_of(cfg)
    source = train_runs(cfg["model"]["init_from"], runs.parent.parent)
    if source is None:
        return None
    parent = starting_point.parent_config(cfg)
    return link_completed_start(parent, config_hash(parent), runs, [source])


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
