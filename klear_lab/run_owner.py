"""Which process writes a run: ``run.json`` records it while the run is running, so a resume, ``klear-lab
runs`` and a sweep can tell a live run from one whose process died (killed, preempted, the machine gone)."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

PROCESS_KEYS = ("pid", "host", "pid_start")


def running_process() -> dict[str, Any]:
    """Who writes a running run: ``run.json`` keeps it so a resume can tell a live run from a dead one.
    ``pid_start`` (the process' start time) tells the writer from a later process given the same pid."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "pid_start": process_start(os.getpid())}


def still_running(identity: dict[str, Any]) -> bool:
    """Whether the process a ``running`` record names is alive here and still the run's writer (another
    machine's cannot be checked: a run preempted there is resumed)."""
    pid = identity.get("pid")
    if identity.get("host") != socket.gethostname() or not isinstance(pid, int):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # gone (or no /proc: assume gone)
        return False
    if identity.get("pid_start") is not None:  # a zombie (killed, not yet reaped) has no command line
        return bool(cmdline) and process_start(pid) == identity["pid_start"]
    return b"klear" in cmdline  # a record from before pid_start: the best guess


def live_status(record: dict[str, Any]) -> str:
    """What a run's ``run.json`` status means now: a ``running`` record whose writer is gone (``kill -9``,
    preemption, the OOM killer) is ``stopped``, and one written on another machine, whose processes cannot
    be checked from here, ``unknown``; any other status as recorded (``klear-lab runs`` and ``klear-lab
    eval`` must tell a run the same way)."""
    recorded = record.get("status", "unknown")
    if recorded != "running":
        return recorded
    if record.get("host") not in (None, socket.gethostname()):
        return "unknown"
    return "running" if still_running(record) else "stopped"


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, /proc/PID/stat field 22), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[19])  # fields after the command name start at field 3
