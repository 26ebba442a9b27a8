"""A trial's run record (``run.json``) given the end its run could not record itself.

A run the pruner stopped under DDP recorded itself completed before the pruning decision surfaced
(``trial.run_job``); a trial process a Ctrl-C of its sweep SIGKILLed left its run "running" (the worker); a
run whose trial's retry started over elsewhere is no longer the point's run (``kill -9`` before a checkpoint,
or a crash of its own).
"""

from __future__ import annotations

import json
from pathlib import Path

RUN_DIR_ATTR = "run_dir"
"""The trial's user attribute naming its run directory (set by ``record.RecordRunDir`` when training starts);
here, not beside the Lightning callback, so that the sweep's own process reads it without importing Lightning."""


def mark_pruned(run_dir: str | None, reason: str) -> None:
    """Record a run the pruner stopped as ``pruned`` in its ``run.json`` (so ``klear-lab runs --status pruned``
    lists it and ``model.init_from`` never takes it for a finished run)."""
    from klear_lab.tracking import write_json

    path = Path(run_dir or "") / "run.json"
    if run_dir and path.is_file():
        write_json(path, {**json.loads(path.read_text()), "status": "pruned", "error": f"pruned: {reason}"})


def mark_interrupted(runs_dir: Path, pid: int, pid_start: int | None = None, error: str | None = None) -> Path | None:
    """Record the run that trial process ``pid`` (started at ``pid_start``) was writing when a Ctrl-C of its
    sweep SIGKILLed it as a Ctrl-C'd ``klear-lab train`` records itself: failed, "interrupted (Ctrl-C)" (its
    ``run.json`` said running, which ``klear-lab runs`` shows as stopped). Its retry continues it all the
    same. A record of another process given the same pid (a ``kill -9``ed sweep's, before a restart) is
    told apart by its start time. ``error``: another than the Ctrl-C's (a SIGTERM'd sweep's). Returns its
    directory."""
    import socket

    from klear_lab.errors import INTERRUPTED
    from klear_lab.tracking import write_json

    for path in runs_dir.glob("*/run.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):  # unreadable: not a record a trial wrote (write_json replaces it whole)
            continue
        if not (isinstance(record, dict) and record.get("status") == "running" and record.get("pid") == pid
                and record.get("host") == socket.gethostname()):
            continue
        if None not in (pid_start, record.get("pid_start")) and record["pid_start"] != pid_start:
            continue
        kept = {k: v for k, v in record.items() if k not in ("pid", "pid_start")}  # as run.py's failed record
        write_json(path, {**kept, "status": "failed", "error": error or INTERRUPTED})
        return path.parent
    return None


SUPERSEDED = "superseded: "  # how the error of a run whose trial's retry started over elsewhere begins


def mark_superseded(run_dir: str, successor: str, trial_number: int) -> bool:
    """Record a run that its trial's retry (trial ``trial_number``) started over in ``successor`` instead of
    continuing as failed, "superseded", followed by the error it recorded itself, if any. Its ``run.json``
    said running with its process gone (``klear-lab runs``: stopped, "run the sweep again", which does
    nothing once the retry finished the point), interrupted (Ctrl-C), or failed on its own error (advice to
    fix and rerun a run the sweep already ran again; the error stays, after the prefix, for what it says of
    the config). A run a live process writes (resumed by hand, say), one written on another machine, one
    that ended otherwise (completed, pruned) or one already marked is left as it is. Returns whether it was
    marked."""
    from klear_lab.run_owner import live_status
    from klear_lab.tracking import write_json

    path = Path(run_dir) / "run.json"
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):  # gone or damaged: nothing a listing would show as stopped
        return False
    if not isinstance(record, dict):
        return False
    own = record.get("error") if isinstance(record.get("error"), str) else ""
    if live_status(record) not in ("stopped", "failed") or own.startswith(SUPERSEDED):
        return False
    kept = {k: v for k, v in record.items() if k not in ("pid", "pid_start")}  # as run.py's failed record
    error = f"{SUPERSEDED}its trial's retry started over in {successor} (trial {trial_number})"
    write_json(path, {**kept, "status": "failed", "error": f"{error}; its own error: {own}" if own else error})
    return True
