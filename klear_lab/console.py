"""The Rich console every table goes through."""

from __future__ import annotations

import os
import sys
from typing import Any

LOG_WIDTH = 200  # columns when writing to a file or pipe (sweep trial logs, CI, `| tee`)


def make_console(**kwargs: Any):
    """A terminal's own width; in a file or pipe (where Rich assumes 80 and wraps every table) a wide one.

    ``COLUMNS`` set in the environment wins, as it does for Rich.
    """
    from rich.console import Console

    if not sys.stdout.isatty() and "COLUMNS" not in os.environ:
        kwargs.setdefault("width", LOG_WIDTH)
    return Console(**kwargs)


def shown_path(path: str | os.PathLike) -> str:
    """``path`` as commands print it: relative to the working directory where it lies inside it (as ``train``
    and ``sweep`` print the paths they were given), else whole."""
    from pathlib import Path

    path, cwd = Path(path), Path.cwd()
    return str(path.relative_to(cwd)) if path.is_absolute() and path.is_relative_to(cwd) and path != cwd else str(path)


def say(line: str) -> None:
    """``print`` for progress lines that may outlive their reader: where stdout is a pipe that closed (``| head``,
    a terminal gone), later lines go to /dev/null instead of raising ``BrokenPipeError`` in whichever thread
    prints next, which stopped a sweep's workers and left the trials they had claimed marked running."""
    try:
        print(line, flush=True)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's own advice: the interpreter's last flush then succeeds
        os.close(devnull)
