"""The ``klear-lab runs`` table: each run's name whole (relative to the directory the runs share), the columns
beside it at their widths, and a count per status (:func:`klear_lab.run_list.list_runs` gives the rows)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

from klear_lab.run_list import STATUSES, RunRow


def print_runs(rows: list[RunRow], metric: str, as_json: bool = False) -> None:
    """A Rich table (or JSON lines) of ``rows``, then a count per status."""
    if as_json:
        for row in rows:
            print(json.dumps(asdict(row)))
        return
    from rich.markup import escape
    from rich.table import Table

    from klear_lab.console import make_console

    colours = {"running": "cyan", "stopped": "bold red", "failed": "red", "pruned": "magenta", "completed": "green",
               "unknown": "yellow"}
    console = make_console()
    if not rows:  # a header over nothing said no more
        console.print("no runs")
        return
    names, base = run_names(rows)
    cells = _cells(rows, metric)
    table = Table(show_header=True)
    # The name tells the runs apart (seeds differ in the last characters): its width where the terminal has it,
    # else folded onto more lines, whole; the date and the note (an error, a command to copy) wrap beside it.
    table.add_column("run", overflow="fold", width=_name_width(names, cells, console.width))
    for col in cells:
        table.add_column(col, justify="right" if col in ("attempts", "steps", metric) else "left",
                         no_wrap=col not in NARROWEST, overflow="fold" if col == "note" else "ellipsis")
    for i, (r, name) in enumerate(zip(rows, names)):
        table.add_row(escape(name), *(escape(column[i]) if col != "status" else f"[{colours[r.status]}]{r.status}[/]"
                                      for col, column in cells.items()))
    if base:  # the names are relative to it: said once, whole, however long
        console.print(f"in {escape(base)}", soft_wrap=True)
    console.print(table)
    counts = {s: sum(r.status == s for r in rows) for s in STATUSES}
    console.print(", ".join(f"{n} {s}" for s, n in counts.items() if n))


def _cells(rows: list[RunRow], metric: str) -> dict[str, list[str]]:
    """The text of each column beside the run's name, by header."""
    return {"kind": [r.kind for r in rows], "status": [r.status for r in rows], "updated": [r.updated for r in rows],
            "attempts": [str(r.attempts) for r in rows],
            "steps": ["" if r.steps is None else str(r.steps) for r in rows],
            metric: ["" if r.metric is None else f"{r.metric:.4g}" for r in rows],
            "ckpt": ["yes" if r.checkpoint else "" for r in rows], "note": [_shorten(r.note) for r in rows]}


def run_names(rows: list[RunRow]) -> tuple[list[str], str]:
    """Each row's run directory relative to the directory holding them all, and that directory ("" when they
    share none): ``sweep_runs/NAME/runs/`` repeated on every row took the width the names need."""
    dirs = [Path(r.run_dir) for r in rows]
    try:
        base = os.path.commonpath([d.parent for d in dirs]) if dirs else ""
    except ValueError:  # absolute and relative paths mixed
        base = ""
    if base in ("", "."):  # nothing shared, or already relative to here
        return [str(d) for d in dirs], ""
    return [os.path.relpath(d, base) for d in dirs], base


NARROWEST = {"updated": len("2026-12-06"), "note": 20}  # the columns that wrap beside the name, at their narrowest


def _name_width(names: list[str], cells: dict[str, list[str]], width: int) -> int:
    """The longest name where the terminal has room, else what the other columns leave at their narrowest
    (``cells``: each column's header and cells; 16 at least). Each column takes 3 more for its border and
    padding, and the table 1."""
    longest = max((len(n) for n in names), default=3)
    beside = sum(NARROWEST.get(col, max(map(len, [col, *column]))) for col, column in cells.items())
    room = width - beside - 3 * (len(cells) + 1) - 1
    return min(longest, max(room, 16))


def _shorten(note: str, limit: int = 160) -> str:
    """A long error (a gloo message is 300 characters) cut in the middle, keeping how to continue."""
    if len(note) <= limit:
        return note
    error, sep, how = note.rpartition(" -> ")
    keep = max(limit - len(how) - 5, 40)
    return f"{error[:keep]}... -> {how}" if sep else note[:limit] + "..."
