"""``klear-lab runs [PATH ...]``: the runs under some directories and what became of each.

The status comes from ``run.json``, checked against this machine's processes:

- ``completed`` / ``failed`` (with its error) / ``pruned`` (a sweep's pruner stopped it) as the run recorded;
- ``running``: recorded as running, and the writer's process is alive here; or a stopped or failed run that a
  ``klear-lab resume`` is building (it holds ``.lock``: :func:`resuming_process`), "being resumed";
- ``stopped``: recorded as running, but the writer's process is gone (``kill -9``, preemption, the
  OOM killer), which is what a researcher coming back to a machine most needs to find;
- ``unknown``: recorded as running on another machine, whose processes cannot be checked here.

A stopped or failed SFT/RL run with a checkpoint can continue, and the table says how: ``klear-lab
resume RUN_DIR``, or for a sweep's trial the command that continues its sweep (the sweep retries its
trials). A run that failed on its config or data, or diverged, would fail the same way again: the
table says to fix the config first; one a plugin's code failed, to fix the plugin and rerun from what runs the
fixed file (its experiment, or its sweep), not from the saved config, which runs the copy of the code it kept.

Its ``steps`` are the steps done as ``csv/metrics.csv`` shows them (:func:`klear_lab.run_progress.steps_done`):
optimizer steps for SFT, rollout steps for RL, alike whether a stopped run's last row was a training row or an
evaluation.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import importlib
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from klear_lab.distributed import recorded_error
from klear_lab.errors import REPEATING_ERRORS, KlearError, did_you_mean
from klear_lab.resume import checkpoint_path
from klear_lab.run_advice import fix_first, recorded_command
from klear_lab.run_owner import live_status
from klear_lab.run_progress import run_progress
from klear_lab.sweep.run_status import SUPERSEDED

STATUSES = ("running", "stopped", "failed", "pruned", "completed", "unknown")
# Where run directories sit below a given path: runs/<run>, sweep_runs/<sweep>/runs/<run> (given a runs
# directory, a sweep, the sweeps directory or the directory holding it).
RUN_GLOBS = ("*/run.json", "runs/*/run.json", "*/runs/*/run.json", "*/*/runs/*/run.json")


@dataclass(frozen=True)
class RunRow:
    """One run directory as the table shows it."""

    run_dir: str
    kind: str
    status: str
    attempts: int
    steps: int | None  # steps done (SFT: optimizer steps, RL: rollout steps) as csv/metrics.csv shows them
    metric: float | None  # the summary's value, else the last logged one
    checkpoint: bool
    note: str  # the error, or how to continue
    updated: str = ""  # local time run.json or csv/metrics.csv last changed: is a running run still moving?
    command: list[str] | None = None  # the `klear-lab train|eval ...` that started it, as typed (--json only)


def find_runs(paths: list[str | Path]) -> list[Path]:
    """Every run directory at or below ``paths`` (a run, a runs directory, a sweep, a sweeps directory),
    oldest first by the time ``run.json`` was last written.

    Raises:
        KlearError: a path that does not exist or is not a directory (exit code 2).
    """
    found: dict[Path, Path] = {}  # resolved -> as found (a symlinked directory is listed once)
    for raw in paths:
        path = Path(raw).expanduser()  # a quoted `~/runs`: no shell expanded it
        if not path.is_dir():
            what = "not a directory: give a run, runs or sweep directory" if path.exists() else "no such directory"
            raise KlearError(f"{path}: {what}")
        runs = [path] if (path / "run.json").is_file() else [r.parent for p in RUN_GLOBS for r in path.glob(p)]
        for run_dir in runs:
            found.setdefault(run_dir.resolve(), run_dir)
    return sorted(found.values(), key=lambda d: (_mtime(d / "run.json"), str(d)))


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # deleted since the glob: listed first, then shown as unreadable
        return 0.0


def unrecorded_run_dirs(paths: list[str | Path]) -> list[Path]:
    """Directories at or below ``paths`` (where :func:`find_runs` looks) that hold a run's ``config.yaml`` and
    its logs or checkpoints but no ``run.json``: not listed (their status is unknown), and said to be."""
    found: dict[Path, Path] = {}
    globs = [g.replace("run.json", "config.yaml") for g in RUN_GLOBS]
    for raw in paths:
        path = Path(raw).expanduser()
        candidates = [path] if (path / "config.yaml").is_file() else [c.parent for g in globs for c in path.glob(g)]
        for run_dir in candidates:
            if not (run_dir / "run.json").exists() and any((run_dir / d).is_dir() for d in ("csv", "checkpoints")):
                found.setdefault(run_dir.resolve(), run_dir)
    return sorted(found.values())


def run_row(run_dir: Path, metric: str) -> RunRow:
    """What ``run_dir`` holds; an unreadable ``run.json`` becomes a row that names it, not an error, and a
    damaged ``csv/metrics.csv`` or ``summary.json`` a note that names it beside what the rest says."""
    record = run_dir / "run.json"
    try:
        identity = json.loads(record.read_text())
    except (OSError, ValueError) as exc:
        return RunRow(str(run_dir), "?", "unknown", 0, None, None, False, f"unreadable {record}: {exc}")
    if not isinstance(identity, dict):
        return RunRow(str(run_dir), "?", "unknown", 0, None, None, False,
                      f"unreadable {record}: a JSON {type(identity).__name__}, not an object")
    tags = identity.get("tags")
    kind = next((t.split(":", 1)[1] for t in tags if str(t).startswith("kind:")), "?") \
        if isinstance(tags, list) else "?"
    status = _status(identity)
    steps, value, damaged = run_progress(run_dir, metric)
    has_ckpt = checkpoint_path(run_dir).is_file()
    changed = max(_mtime(record), _mtime(run_dir / "csv" / "metrics.csv"))
    resumer = resuming_process(run_dir) if status in ("stopped", "failed") else None
    if resumer is not None:  # run.json says running only once the resume has built its run (minutes)
        status, how = "running", f"being resumed ({f'pid {resumer}' if resumer else 'its pid is not visible here'})"
    else:
        how = _note(run_dir, identity, status, kind, has_ckpt)
    note = "; ".join(n for n in (*damaged, how) if n)
    return RunRow(str(run_dir), kind, status, _attempts(identity), steps, value, has_ckpt, note,
                  time.strftime("%Y-%m-%d %H:%M", time.localtime(changed)) if changed else "",
                  recorded_command(identity))


def resuming_process(run_dir: Path) -> int | None:
    """The pid of the process resuming ``run_dir`` (0 where it is not known), or None where none does: who holds
    ``run_dir/.lock`` (:func:`klear_lab.run.run_lock`), which a resume takes before it checks the run and holds
    while it builds it. A run never resumed has no ``.lock``, and none is made.

    Read from ``/proc/locks`` where there is one: trying the lock (shared, without waiting) would refuse a
    resume starting in that instant ("another process is resuming this run"), so it is tried only where this
    kernel's lock table cannot be read. Over NFS another machine's lock is not in it: that run shows as its
    ``run.json`` says until the resume writes ``running``."""
    try:
        held = os.stat(run_dir / ".lock")
    except OSError:
        return None
    with contextlib.suppress(OSError):
        return _lock_holder(held, Path("/proc/locks").read_text().splitlines())
    try:
        fd = os.open(run_dir / ".lock", os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0
    except OSError:  # a file system without flock: nothing to tell
        return None
    finally:
        os.close(fd)  # releases what it took
    return None


def _lock_holder(held: os.stat_result, locks: list[str]) -> int | None:
    """The pid ``locks`` (``/proc/locks``' lines) give for a FLOCK on the file ``held`` (``1: FLOCK  ADVISORY
    WRITE 4242 fd:01:1234 0 EOF``: major and minor in hex, the inode in decimal), else None; waiters (``->``)
    aside."""
    for line in locks:
        parts = line.split()
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5].rpartition(":")[2] == str(held.st_ino):
            with contextlib.suppress(ValueError):
                major, minor = (int(n, 16) for n in parts[5].rsplit(":", 2)[:2])
                if (major, minor) == (os.major(held.st_dev), os.minor(held.st_dev)) and int(parts[4]) > 0:
                    return int(parts[4])
    return None


def _attempts(identity: dict[str, Any]) -> int:
    try:
        return int(identity.get("attempts", 1))
    except (TypeError, ValueError):  # edited by hand: the table still lists the run
        return 1


def _status(identity: dict[str, Any]) -> str:
    status = live_status(identity)
    return status if status in STATUSES else "unknown"


def _note(run_dir: Path, identity: dict[str, Any], status: str, kind: str, has_ckpt: bool) -> str:
    if status == "unknown" and identity.get("host"):
        return f"running on {identity['host']} (pid {identity.get('pid')}): not checked from here"
    if status not in ("stopped", "failed"):
        return ""
    error = recorded_error(run_dir, identity)
    if error.startswith(SUPERSEDED):  # its retry finished the point in another run: nothing to continue
        return error
    sweep = sweep_rerun(run_dir) if kind in ("sft", "rl") else None
    repeats = repeating_error(error)
    if sweep is None and not (run_dir / "config.yaml").is_file():
        how = f"{run_dir / 'config.yaml'} is missing: neither resume nor a rerun can start from this directory"
    elif repeats is not None:
        how = ("sweep trial: " if sweep is not None else "") + fix_first(repeats, run_dir, sweep)
    elif kind not in ("sft", "rl"):
        how = f"run it again: klear-lab train {run_dir / 'config.yaml'}"
    elif sweep is not None:
        how = f"sweep trial: run the sweep again: {sweep}"
    elif has_ckpt:
        how = f"klear-lab resume {run_dir}"
    else:
        how = f"no checkpoint: klear-lab train {run_dir / 'config.yaml'}"
    return f"{error} -> {how}" if error else how


_ERROR_CLASS = re.compile(r"(?:^|; )(?:rank \d+: )?((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*): ")


def repeating_error(error: str) -> type[BaseException] | None:
    """The class of the first error in ``error`` (``run.json``'s, ``module.Class: message``; a DDP run's
    ``rank 1: ...; rank 0: ...``) that a rerun of the same config repeats (:data:`REPEATING_ERRORS`), or None.
    Only classes of modules imported here, or of klear_lab's, are known: a file is no reason to import code."""
    for match in _ERROR_CLASS.finditer(error or ""):
        module_name, _, name = match.group(1).rpartition(".")
        module = sys.modules.get(module_name)
        if module is None and module_name.startswith("klear_lab."):
            with contextlib.suppress(Exception):  # a module since renamed: not this run's advice to fail
                module = importlib.import_module(module_name)
        cls = getattr(module, name, None)
        if isinstance(cls, type) and issubclass(cls, REPEATING_ERRORS):
            return cls
    return None


def sweep_trial(run_dir: Path) -> str | None:
    """The command that continues the sweep whose SFT or RL trial ``run_dir`` is, when one does from here (a
    copied sweep directory has none); None for any other run: a starting point (a sweep's parent on several
    devices is resumed by hand), an eval run, a run outside a sweep."""
    import yaml

    sweep = sweep_rerun(run_dir)
    if sweep is None or sweep.startswith("("):
        return None
    try:
        run = yaml.safe_load((run_dir / "config.yaml").read_text())["run"]
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return None  # the resume's own checks say what is wrong
    trial = isinstance(run, dict) and re.match(r"sweep .+ trial \d+$", str(run.get("notes") or ""))
    return sweep if trial and run.get("kind") in ("sft", "rl") else None


def sweep_rerun(run_dir: Path) -> str | None:
    """The command that continues the sweep whose trial (or starting point) this run is, if it is one."""
    sweep_dir = run_dir.parent.parent
    if run_dir.parent.name != "runs" or not (sweep_dir / "sweep.json").is_file():
        return None
    from klear_lab.sweep.locate import continue_command

    return continue_command(sweep_dir)


def list_runs(paths: list[str | Path], metric: str = "val/acc", statuses: list[str] | None = None) -> list[RunRow]:
    """The rows of :func:`find_runs`' run directories, only those with one of ``statuses`` if given."""
    rows = [run_row(d, metric) for d in find_runs(paths)]
    return [r for r in rows if not statuses or r.status in statuses]


def missing_metric(rows: list[RunRow], metric: str) -> tuple[str, bool] | None:
    """When no run of ``rows`` has ``metric``: (what to say, whether it is an error). An error (exit 2) when the
    runs log other metrics and not this one, nor is it a name their kinds log (a typo: ``val/acx``), with a
    did-you-mean from the metrics they have; a name their kinds log but none has logged yet (an SFT run's
    ``val/acc`` before its evaluation) is a note. None when some run has it, or there are no runs."""
    if not rows or any(r.metric is not None for r in rows):
        return None
    have = sorted(set().union(*(metric_names(Path(r.run_dir)) for r in rows)))
    if metric in have:  # a column without a value yet
        return None
    logged = _is_logged(metric, {r.kind for r in rows})
    if logged is None:  # runs of no kind known here (unreadable records): nothing to tell a typo by
        return f"no listed run has the metric {metric!r}", False
    if logged:
        return f"no listed run has logged {metric!r} yet", False
    did = did_you_mean(metric, have)
    prefix = metric.split("/", 1)[0] + "/"
    same = [m for m in have if m.startswith(prefix)] if "/" in metric else []
    listed = f"; they have{f' under {prefix}' if same else ''}: {', '.join(same or have)}" if have else \
        "; they have logged no metrics yet"
    return f"no listed run has the metric {metric!r}{did}{listed}", True


def metric_names(run_dir: Path) -> set[str]:
    """The metrics ``run_dir`` has: its ``csv/metrics.csv`` columns and its ``summary.json`` keys."""
    names: set[str] = set()
    with contextlib.suppress(OSError, ValueError, StopIteration, csv.Error), \
            (run_dir / "csv" / "metrics.csv").open() as f:
        names |= set(next(csv.reader(f))) - {"step", "epoch"}
    with contextlib.suppress(OSError, ValueError):
        summary = json.loads((run_dir / "summary.json").read_text())
        names |= {k for k in summary if not k.startswith("_")} if isinstance(summary, dict) else set()  # _identity
    return names


def _is_logged(metric: str, kinds: set[str]) -> bool | None:
    """Whether ``metric`` is a name runs of one of ``kinds`` log; None when none of ``kinds`` is a run kind
    (unreadable records) or the sweep subsystem that lists the names is not installed."""
    try:
        from klear_lab.sweep.metrics import KINDS, is_logged
    except ImportError:
        return None
    known = kinds & set(KINDS)
    return any(is_logged(metric, kind) for kind in known) if known else None
