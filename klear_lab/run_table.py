"""The ``klear-lab runs`` table: each run's name whole (relative to the directory the runs share), the columns
beside it at their widths, and a count per status (:func:`klear_lab.run_list.list_runs` gives the rows).

A terminal too narrow for every column at its narrowest (80 columns, say) gives some up, least needed first
(:data:`GIVE_UP`): the notes move under the table, each after its run's name, and the hidden columns are named
in a line under it. The name, the status and the metric always stay; ``--json`` prints every field."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from rich.cells import cell_len

from klear_lab.run_list import STATUSES, RunRow

if TYPE_CHECKING:
    from rich.console import Console

COLOURS = {"running": "cyan", "stopped": "bold red", "failed": "red", "pruned": "magenta", "completed": "green",
           "unknown": "yellow"}
# What a narrow terminal gives up, in turn, until the rest fit at their narrowest: the note (an error, a command
# to copy) moves under the table, whole; then columns are hidden: attempts (a retry count), ckpt (the note says
# whether a run can resume), kind, steps, updated.
GIVE_UP = ("note", "attempts", "ckpt", "kind", "steps", "updated")
NAME_NARROWEST = 16  # a run's name narrower than this folds onto too many lines to read


def print_runs(rows: list[RunRow], metric: str, as_json: bool = False, nothing: str = "no runs") -> None:
    """A Rich table (or JSON lines) of ``rows``, then a count per status; ``nothing``: what no row says."""
    if as_json:
        for row in rows:
            print(json.dumps(asdict(row)))
        return
    from rich.markup import escape

    from klear_lab.console import make_console

    console = make_console()
    if not rows:  # a header over nothing said no more
        console.print(nothing)
        return
    names, base = run_names(rows)
    metric = metric_header(metric)
    cells = _cells(rows, metric)
    shown = columns_that_fit(names, cells, console.width)
    if base:  # the names are relative to it: said once, whole, however long
        console.print(f"in {escape(base)}", soft_wrap=True)
    console.print(_table(rows, names, shown, metric, console.width))
    if hidden := [col for col in cells if col not in shown and col != "note"]:
        console.print(_hidden_line(hidden, console.width))
    if "note" not in shown:
        _print_notes(console, names, [r.note for r in rows])  # whole: not cut to fit a table cell
    counts = {s: sum(r.status == s for r in rows) for s in STATUSES}
    console.print(", ".join(f"{n} {s}" for s, n in counts.items() if n))


def _table(rows: list[RunRow], names: list[str], shown: dict[str, list[str]], metric: str, width: int):
    """The name, then the ``shown`` columns. The name takes its width where the terminal has it, else is folded
    onto more lines, whole (seeds differ in its last characters); the date and the note wrap beside it."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(show_header=True)
    name_width = _name_width(names, shown, width)
    table.add_column("run", overflow="fold", width=name_width)
    # The date keeps its time on its line where the note still has its narrowest beside it; else the time goes
    # under the date, and the note keeps its width (Rich would narrow both alike).
    date_width = None if _table_width(name_width, shown, {"note": NARROWEST["note"]}) <= width \
        else NARROWEST["updated"]
    for col in shown:
        table.add_column(col, justify="right" if col in ("attempts", "steps", metric) else "left",
                         no_wrap=col not in NARROWEST, overflow="fold" if col == "note" else "ellipsis",
                         width=date_width if col == "updated" else None)
    for i, (r, name) in enumerate(zip(rows, names)):
        table.add_row(escape(name), *(escape(column[i]) if col != "status" else f"[{COLOURS[r.status]}]{r.status}[/]"
                                      for col, column in shown.items()))
    return table


def _print_notes(console: Console, names: list[str], notes: list[str]) -> None:
    """Each note under the table, whole: its run's name, then the note indented under it, wrapped at the
    terminal's width (a path longer than that folded)."""
    from rich.text import Text

    for name, note in zip(names, notes):
        if note:
            console.print(Text(f"{name}:", style="bold", overflow="fold"))
            for line in Text(note).wrap(console, max(console.width - 2, 8), overflow="fold"):
                line.rstrip()  # the space it was wrapped at
                console.print(Text("  ") + line, overflow="fold")


def columns_that_fit(names: list[str], cells: dict[str, list[str]], width: int) -> dict[str, list[str]]:
    """``cells`` less the columns (:data:`GIVE_UP`, in turn) the terminal has no room for beside the names on one
    line, all of them where it has: a name folded onto three lines beside an empty ``ckpt`` column could not be
    copied into ``klear-lab resume`` (a review). The names' line is at most what the status and the metric alone
    leave (:data:`NAME_NARROWEST` at least): a longer name folds, and a wider terminal never hides a column."""
    always = {col: cells[col] for col in cells if col not in GIVE_UP}
    name = min(max(map(cell_len, names), default=3), max(width - _table_width(0, always), NAME_NARROWEST))
    shown = dict(cells)
    for col in GIVE_UP:
        if _table_width(name, shown) <= width:
            break
        shown.pop(col, None)
    return shown


def _hidden_line(hidden: list[str], width: int) -> str:
    """Which columns a ``width``-column terminal hid, said once, and how to see them."""
    listed = hidden[0] if len(hidden) == 1 else f"{', '.join(hidden[:-1])} and {hidden[-1]}"
    return (f"{listed} column{'s' if len(hidden) > 1 else ''} hidden at {width} columns: "
            "widen the terminal or use --json")


COLUMNS = ("kind", "status", "updated", "attempts", "steps", "ckpt", "note")


def metric_header(metric: str) -> str:
    """The metric column's header: ``--metric steps`` took the steps column's place (a red team)."""
    return metric if metric not in (*COLUMNS, "run") else f"metric {metric}"


def _cells(rows: list[RunRow], metric: str) -> dict[str, list[str]]:
    """The text of each column beside the run's name, by header (``metric``: :func:`metric_header`'s)."""
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


def _table_width(name: int, cells: dict[str, list[str]], narrowest: dict[str, int] = NARROWEST) -> int:
    """The table's width with the name ``name`` wide and ``cells`` (each column's header and cells) at their
    widest cell, or at most ``narrowest`` for those it names. Each column takes 3 more for its border and
    padding, and the table 1."""
    widths = (min(narrowest.get(col, longest), longest)
                 for col, longest in ((col, max(map(cell_len, [col, *column]))) for col, column in cells.items()))
    return name + sum(widths) + 3 * (len(cells) + 1) + 1


def _name_width(names: list[str], cells: dict[str, list[str]], width: int) -> int:
    """The longest name where the terminal has room, else what the other columns leave at their narrowest:
    :data:`NAME_NARROWEST` or more once :func:`columns_that_fit` chose them; less only where the status and the
    metric alone leave less (a 40-column terminal), so as not to cut them."""
    longest = max(map(cell_len, names), default=3)  # on-screen: a CJK character takes 2
    return min(longest, max(width - _table_width(0, cells), 4))


def _shorten(note: str, limit: int = 160) -> str:
    """A long error (a gloo message is 300 characters) cut in the middle, keeping how to continue."""
    if len(note) <= limit:
        return note
    error, sep, how = note.rpartition(" -> ")
    keep = max(limit - len(how) - 5, 40)
    return f"{error[:keep]}... -> {how}" if sep else note[:limit] + "..."
