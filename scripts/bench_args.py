"""Argument checks shared by the benchmark scripts: a bad count is an argparse error (exit 2, ``argument --x:
must be >= 1, got 0``) before any heavy import or work, not a traceback minutes into a run.

Imported as a sibling (``from bench_args import at_least``), as ``bench_train`` is: the scripts run as
``python scripts/bench_x.py``, which puts ``scripts/`` on ``sys.path``. Standard library and
``klear_lab.hardware`` only.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from klear_lab.hardware import cpu_cores as usable_cpus  # the affinity mask; no heavy imports


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type=``: an integer no smaller than ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    parse.__name__ = f"integer >= {minimum}"  # what argparse's own messages call the type
    return parse


positive = at_least(1)
non_negative = at_least(0)


def positive_float(text: str) -> float:
    """An argparse ``type=``: a finite number above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def comma_list(text: str) -> list[str]:
    """An argparse ``type=``: a comma-separated list without empty items (``a,b``; not ``a,,b`` nor ``""``)."""
    items = text.split(",")
    if not all(item.strip() for item in items):
        raise argparse.ArgumentTypeError(f"must be a comma-separated list without empty items, got {text!r}")
    return [item.strip() for item in items]


def cpu_count(text: str) -> int:
    """An argparse ``type=``: a number of CPUs from 0 to :func:`usable_cpus` (pinning to more is impossible)."""
    value = non_negative(text)
    if value > usable_cpus():
        raise argparse.ArgumentTypeError(f"must be <= {usable_cpus()} (the CPUs this process may use), got {value}")
    return value
