"""``klear-lab runs`` in a narrow terminal: at 80 columns the table's columns at their narrowest took about 110,
so Rich squeezed ``updated`` and ``note`` to nothing. Now the least needed give way, and say so."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest
from rich.cells import cell_len

from klear_lab.cli import main
from klear_lab.run_list import RunRow
from klear_lab.run_table import GIVE_UP, _cells, _table_width, columns_that_fit, print_runs, run_names

BASE = "sweep_runs/quickstart/runs"
DONE = "quickstart-clip_variant=gppo-seed=1-20261206-101530-ab12cd34"
FAILED = "quickstart-clip_variant=gppo-seed=2-20261206-101530-ef56ab78"
RUNNING = "quickstart-clip_variant=dapo-seed=1-20261206-101530-99aa00bb"
NOTE = f"RuntimeError: NCCL watchdog timeout after 1800s -> klear-lab resume {BASE}/{FAILED}"
ROWS = [RunRow(f"{BASE}/{DONE}", "rl", "completed", 1, 120, 0.4375, True, "", "2026-12-06 10:15"),
        RunRow(f"{BASE}/{FAILED}", "rl", "failed", 2, 40, None, True, NOTE, "2026-12-06 11:02"),
        RunRow(f"{BASE}/{RUNNING}", "sft", "running", 1, 7, 0.25, False, "", "2026-12-06 11:30")]
ALL_COLUMNS = ["run", "kind", "status", "updated", "attempts", "steps", "val/acc", "ckpt", "note"]


def printed(monkeypatch, capsys, width: int, rows: list[RunRow] = ROWS) -> str:
    monkeypatch.setenv("COLUMNS", str(width))
    print_runs(rows, "val/acc")
    return capsys.readouterr().out


def header(out: str) -> list[str]:
    (line,) = [line for line in out.splitlines() if line.startswith("┃")]
    return [cell.strip() for cell in line.split("┃")[1:-1]]


def column(out: str, name: str) -> list[str]:
    """The text of column ``name`` on each line of the table's body (a folded cell: several lines)."""
    index = header(out).index(name)
    return [line.split("│")[1 + index].strip() for line in out.splitlines() if line.startswith("│")]


def below(out: str) -> list[str]:
    """The lines under the table."""
    lines = out.splitlines()
    return lines[1 + next(i for i, line in enumerate(lines) if line.startswith("└")):]


def hidden_columns(out: str) -> list[str]:
    """The columns the line under the table names hidden (that line wrapped in a narrow terminal)."""
    said, sep, _ = " ".join(line.strip() for line in below(out)).partition(" hidden at ")
    return said.rsplit(" column", 1)[0].replace(" and ", ", ").split(", ") if sep else []


def note_text(out: str) -> str:
    """The notes, in their column or under the table (each line of a note indented), whitespace left out."""
    notes = column(out, "note") if "note" in header(out) else [line for line in below(out) if line.startswith("  ")]
    return squeezed("".join(notes))


def squeezed(text: str) -> str:
    return "".join(text.split())


@pytest.mark.parametrize("width", [80, 100, 120])
def test_every_shown_cell_is_whole_in_a_narrow_terminal(monkeypatch, capsys, width):
    """At 80 columns ``updated`` and ``note`` had no width left (empty headers, dates gone); at 100 the note ran
    down 23 lines 9 characters wide."""
    out = printed(monkeypatch, capsys, width)
    assert all(cell_len(line) <= width for line in out.splitlines() if not line.startswith("in "))
    assert "…" not in out  # nothing cut with an ellipsis
    shown = header(out)
    assert all(shown) and {"run", "status", "val/acc"} <= set(shown)
    assert "".join(column(out, "run")) == DONE + FAILED + RUNNING  # each name whole, folded
    assert [c for c in column(out, "status") if c] == ["completed", "failed", "running"]
    assert [c for c in column(out, "val/acc") if c] == ["0.4375", "0.25"]
    dates = [c for c in column(out, "updated") if c.startswith("2026")] if "updated" in shown else ["2026-12-06"] * 3
    assert len(dates) == 3 and all(len(d) >= len("2026-12-06") for d in dates)  # the date whole on a line
    assert note_text(out) == squeezed(NOTE)  # the note whole: in its column or under the table
    if "note" in shown:  # and at least 20 wide there (at 100 it had 9: 23 lines for one run)
        (top,) = [line for line in out.splitlines() if line.startswith("┏")]
        assert len(top.split("┳")[shown.index("note")].strip("┏┓")) - 2 >= 20


def test_at_80_columns_the_note_goes_under_the_table_and_the_hidden_column_is_said(monkeypatch, capsys):
    out = printed(monkeypatch, capsys, 80)  # the 61-character names get the room status and metric leave
    assert header(out) == ["run", "status", "val/acc"]
    under = below(out)
    hidden = "kind, updated, attempts, steps and ckpt columns hidden at 80 columns: widen the terminal or use --json"
    assert squeezed(" ".join(under[:2])) == squeezed(hidden)  # wrapped at the terminal's width
    under = under[1:]
    assert under[1] == f"{FAILED}:"  # the note after its run's name, indented, wrapped at the width
    assert squeezed(NOTE) == squeezed("".join(under[2:-1])) and all(line.startswith("  ") for line in under[2:-1])
    assert under[-1] == "1 running, 1 failed, 1 completed"


def test_at_200_columns_every_column_stays(monkeypatch, capsys):
    out = printed(monkeypatch, capsys, 200)
    assert header(out) == ALL_COLUMNS
    assert f"│ {DONE} │" in out and "│ 2026-12-06 10:15 │" in out  # names and dates on one line
    assert below(out) == ["1 running, 1 failed, 1 completed"]  # nothing hidden, no note under the table
    assert note_text(out) == squeezed(NOTE)


@pytest.mark.parametrize("width", range(30, 201, 10))
def test_no_column_is_lost_silently_at_any_width(monkeypatch, capsys, width):
    """Each column is in the table, named in the line under it, or (the note) printed under it."""
    out = printed(monkeypatch, capsys, width)
    shown = header(out)
    assert {"run", "status", "val/acc"} <= set(shown)  # what tells the runs apart and how they did: always
    assert set(shown) - {"note"} | set(hidden_columns(out)) == set(ALL_COLUMNS) - {"note"}
    assert note_text(out) == squeezed(NOTE)


def test_columns_give_way_in_the_documented_order():
    names, _ = run_names(ROWS)
    cells = _cells(ROWS, "val/acc")
    assert list(columns_that_fit(names, cells, 200)) == ALL_COLUMNS[1:]
    longest = max(map(len, names))
    previous = list(cells)
    for width in range(200, 29, -1):
        shown = list(columns_that_fit(names, cells, width))
        gone = [c for c in GIVE_UP if c not in shown]
        assert gone == list(GIVE_UP[:len(gone)])  # the least needed first
        assert set(shown) <= set(previous)  # narrower: never more columns (wider never hides one: a review)
        previous = shown
        if width >= longest + len("completed") + len("val/acc") + 3 * 3 + 1:  # room for the name on one line
            assert _table_width(longest, {c: cells[c] for c in shown}) <= width  # ... so it has it (a review)
    assert list(columns_that_fit(names, cells, 30)) == ["status", "val/acc"]


def test_json_lines_do_not_depend_on_the_width(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    print_runs(ROWS, "val/acc", as_json=True)
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == [asdict(r) for r in ROWS]


def test_the_cli_at_columns_80(tmp_path, capsys, monkeypatch):
    """Through ``klear-lab runs``: ``COLUMNS`` sets the console's width, as in a terminal."""
    run_dir = tmp_path / "runs" / FAILED
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"status": "failed", "error": "RuntimeError: boom",
                                                  "tags": ["kind:eval"], "attempts": 3}))
    (run_dir / "config.yaml").write_text(f"run:\n  name: {FAILED}\n")
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["runs", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "".join(column(out, "run")) == FAILED and "hidden at 80 columns" in out
    assert "RuntimeError: boom" in out and squeezed(f"klear-lab train {run_dir / 'config.yaml'}") in note_text(out)


def test_a_long_note_under_the_table_is_whole_and_a_metric_named_like_a_column_keeps_its_own(monkeypatch, capsys):
    """Under the table a note was still cut to 160 characters ("... -> klear-lab resume"), though it said whole;
    ``--metric steps`` replaced the steps column and ``--metric note`` was moved under the table (a red team)."""
    long_note = "RuntimeError: gloo " + "x" * 300 + f" -> klear-lab resume {BASE}/{FAILED}"
    rows = [ROWS[0], RunRow(f"{BASE}/{FAILED}", "rl", "failed", 2, 40, None, True, long_note, "2026-12-06 11:02")]
    out = printed(monkeypatch, capsys, 80, rows)
    assert "note" not in header(out) and squeezed(long_note) in note_text(out)
    monkeypatch.setenv("COLUMNS", "200")
    for metric in ("steps", "note"):
        print_runs(rows, metric)
        out = capsys.readouterr().out
        assert header(out)[-1] == "note" and f"metric {metric}" in header(out) and "steps" in header(out)
        assert column(out, "steps")[:2] == ["120", "40"]


def test_a_wide_character_name_is_measured_on_screen(monkeypatch, capsys):
    """Names were measured in characters: a CJK name (2 cells a character) was folded where it fitted."""
    def row(name):
        return RunRow(f"{BASE}/{name}", "rl", "completed", 1, 3, 0.5, True, "", "2026-12-06 10:15")

    out = printed(monkeypatch, capsys, 200, [row("\u5b9f\u9a13-" + "\u6e2c" * 20 + "-s0"), row("short-s0")])
    assert any("\u6e2c" * 20 + "-s0" in line for line in out.splitlines())  # on one line, whole
    assert all(cell_len(line) <= 200 for line in out.splitlines())


def test_at_80_columns_a_name_that_fits_whole_is_not_folded(monkeypatch, capsys):
    """``runs/quickstart-sft-20`` / ``261206-214407-634986-s`` / ``0``: folded onto three lines beside kind,
    updated, steps and an empty ckpt column, the name could not be copied into ``klear-lab resume`` (a review)."""
    names = ["quickstart-sft-20261206-214407-634986-s0", "quickstart-rl-20261206-220102-1b2c3d-s0"]
    rows = [RunRow(f"runs/{n}", "sft", "stopped", 1, 250, None, True, f"SIGTERM -> klear-lab resume runs/{n}",
                   "2026-12-06 21:44") for n in names]
    out = printed(monkeypatch, capsys, 80, rows)
    assert [cell for line in out.splitlines() if line.startswith("│") if (cell := line.split("│")[1].strip())] == names
    assert {"run", "status", "val/acc"} <= set(header(out)) and max(map(cell_len, out.splitlines())) <= 80


def test_one_long_name_does_not_fold_the_others_or_hide_columns_as_the_terminal_widens(monkeypatch, capsys):
    """Three 33-character names and one of 65: at 80 columns every name folded beside six columns, and at 100 the
    long one fitted and every optional column was hidden, more than at 90 (a review)."""
    names = [f"quickstart-sft-2026120{i}-2144-s0-xx" for i in range(3)] + ["q" * 60 + "-s0-x"]
    cells = _cells([RunRow(f"runs/{n}", "sft", "stopped", 1, 5, 0.5, True, "", "2026-12-06 21:44") for n in names],
                   "val/acc")
    counts = [len(columns_that_fit(names, cells, width)) for width in range(60, 201)]
    assert counts == sorted(counts)  # a wider terminal never shows fewer columns
    out = printed(monkeypatch, capsys, 80, [RunRow(f"runs/{n}", "sft", "stopped", 1, 5, 0.5, True, "",
                                                   "2026-12-06 21:44") for n in names])
    body = [line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│")]
    assert all(n in body for n in names[:3])  # the short names on one line each
