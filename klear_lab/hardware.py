"""Facts about the machine this process runs on (no heavy imports: the sweep process uses it too)."""

from __future__ import annotations

import os


def cpu_cores() -> int:
    """Cores this process may use: its CPU affinity (``taskset``, cgroup cpusets), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
