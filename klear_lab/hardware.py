"""Facts about the machine this process runs on (no heavy imports: the sweep process uses it too)."""

from __future__ import annotations

import os


def cpu_cores() -> int:
    """Cores this process may use: its CPU affinity (``taskset``, cgroup cpusets), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def thread_cap() -> int | None:
    """``OMP_NUM_THREADS`` when set to a whole number >= 1: the user's cap on a process's threads (a shared
    node, a job scheduler's slot), which the automatic count (cores // parallel workers) stays under."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) >= 1 else None


def auto_threads(workers: int = 1) -> int:
    """Torch threads for one of ``workers`` parallel processes: cores // workers, at most :func:`thread_cap`."""
    n = max(cpu_cores() // max(workers, 1), 1)
    cap = thread_cap()
    return min(n, cap) if cap else n
