"""``klear-lab runs`` as a terminal shows it: every run's name whole, and a misspelt ``--metric`` refused first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.cells import cell_len

from klear_lab.cli import main

ARM = "my_rl_eps-eps_high-0.28-20261206-031327-3ffbd1"
# A gloo error, 300 characters long before the table shortens it: the note that took the name's width.
GLOO = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer " + "x" * 200


def make_run(runs: Path, name: str, status: str, **extra) -> None:
    """A run directory as a training run leaves it: run.json, csv/metrics.csv and (finished) summary.json."""
    run_dir = runs / name
    (run_dir / "csv").mkdir(parents=True)
    record = {"status": status, "tags": ["kind:rl", f"seed:{name[-1]}"], **extra}
    (run_dir / "run.json").write_text(json.dumps(record))
    (run_dir / "config.yaml").write_text(f"run:\n  name: {name}\n")  # a resume or rerun needs it
    (run_dir / "csv" / "metrics.csv").write_text("step,train/loss,val/gain\n0,1.5,\n1,1.2,0.25\n")
    if status == "completed":
        (run_dir / "summary.json").write_text(json.dumps({"val/gain": 0.5}))


@pytest.fixture
def sweep_runs(tmp_path) -> Path:
    """A sweep's runs: one arm's seeds differ only in their last characters (-s0, -s1), and two of them failed."""
    runs = tmp_path / "sweep_runs" / "my_rl_eps" / "runs"
    make_run(runs, f"{ARM}-s0", "completed")
    make_run(runs, f"{ARM}-s1", "failed", error=GLOO)
    make_run(runs, "my_rl_eps-baseline-20261206-031327-9a8b7c-s0", "failed", error="KeyboardInterrupt")
    return tmp_path / "sweep_runs" / "my_rl_eps"


def name_column(out: str) -> str:
    """The first column's text, its folded lines joined: each run's name in turn when none was cut."""
    body = out.split("╇", 1)[1] if "╇" in out else ""
    return "".join(line.split("│")[1].strip() for line in body.splitlines() if line.startswith("│"))


@pytest.mark.parametrize("width", [100, 120, 160, 200])
def test_every_run_name_is_whole_at_any_width(sweep_runs, capsys, monkeypatch, width):
    """At COLUMNS=200 two rows read ``sweep_runs/my_rl_eps/runs/my_rl_eps-eps_high-0.28-20261206…``: the
    seed suffix cut, one completed and one stopped run alike; at 120-160 every row read ``sweep_runs/my_npr…``."""
    monkeypatch.setenv("COLUMNS", str(width))
    assert main(["runs", str(sweep_runs), "--metric", "val/gain"]) == 0
    out = capsys.readouterr().out
    assert name_column(out) == f"{ARM}-s0{ARM}-s1my_rl_eps-baseline-20261206-031327-9a8b7c-s0"  # oldest first
    assert f"in {sweep_runs / 'runs'}" in out  # the directory they share, said once above the table
    table = [line for line in out.splitlines() if not line.startswith("in ")]  # that path is whole, however long
    assert max(cell_len(line) for line in table) <= width  # nothing cropped at the right edge
    assert "2 failed, 1 completed" in out
    if width >= 160:  # room for the names: each on one line
        assert f"│ {ARM}-s0 " in out and f"│ {ARM}-s1 " in out


def test_the_stopped_and_failed_view_keeps_the_names_and_the_whole_command(sweep_runs, capsys, monkeypatch):
    """The view the README recommends: the names whole, and the command to continue folded, not cut."""
    monkeypatch.setenv("COLUMNS", "120")
    assert main(["runs", str(sweep_runs.parent), "--status", "stopped", "--status", "failed"]) == 0
    out = capsys.readouterr().out
    assert name_column(out) == f"{ARM}-s1my_rl_eps-baseline-20261206-031327-9a8b7c-s0"
    lines = out.splitlines()  # the notes: in their column, or under the table where the names need its room
    notes = "".join("".join(line.split("│")[-2].split()) for line in lines if line.startswith("│")) + "".join(
        "".join(line.split()) for line in lines[next(i for i, x in enumerate(lines) if x.startswith("└")):])
    for name in (f"{ARM}-s1", "my_rl_eps-baseline-20261206-031327-9a8b7c-s0"):  # whitespace left out: folded
        assert f"klear-labtrain{sweep_runs / 'runs' / name / 'config.yaml'}" in notes
    assert "…" not in out and max(cell_len(line) for line in out.splitlines()) <= 120


def test_rows_of_different_directories_keep_what_tells_them_apart(sweep_runs, tmp_path, capsys, monkeypatch):
    """Runs of two sweeps: named from the directory they share, so the sweep stays in each name."""
    monkeypatch.setenv("COLUMNS", "200")
    make_run(tmp_path / "sweep_runs" / "other" / "runs", "other-arm-20261206-040000-aaaaaa-s0", "completed")
    assert main(["runs", str(tmp_path / "sweep_runs"), "--metric", "val/gain"]) == 0
    out = capsys.readouterr().out
    assert name_column(out) == (f"my_rl_eps/runs/{ARM}-s0my_rl_eps/runs/{ARM}-s1"
                                "my_rl_eps/runs/my_rl_eps-baseline-20261206-031327-9a8b7c-s0"
                                "other/runs/other-arm-20261206-040000-aaaaaa-s0")
    assert f"in {tmp_path / 'sweep_runs'}" in out


def test_a_misspelt_metric_is_refused_before_any_table(sweep_runs, capsys):
    """``--metric val/gian`` printed the whole table with an empty column, then the error (exit 2)."""
    assert main(["runs", str(sweep_runs), "--metric", "val/gian"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("klear-lab: error: no listed run has the metric 'val/gian' (did you mean 'val/gain'?)")
    assert main(["runs", str(sweep_runs), "--metric", "val/gian", "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "(did you mean 'val/gain'?)" in err
    assert main(["runs", str(sweep_runs), "--metric", "val/acc"]) == 0  # RL runs log it, these not yet: a note
    out, err = capsys.readouterr()
    assert "2 failed, 1 completed" in out and err.strip() == "klear-lab: note: no listed run has logged 'val/acc' yet"


def test_a_filter_that_keeps_no_run_says_so_without_an_empty_table(sweep_runs, capsys):
    assert main(["runs", str(sweep_runs), "--status", "stopped"]) == 0
    assert capsys.readouterr().out.strip() == f"no stopped runs under {sweep_runs}"
