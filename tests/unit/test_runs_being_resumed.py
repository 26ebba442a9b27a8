"""``klear-lab runs`` of a run another process is resuming: until that process has built the run (minutes at scale)
and written ``running`` to ``run.json``, it holds ``run_dir/.lock`` (``run.run_lock``), and ``runs`` listed the run
as stopped with "klear-lab resume DIR", a command that would be refused. It is listed running now, being resumed."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from klear_lab.cli import main
from klear_lab.run_list import list_runs

ROOT = Path(__file__).resolve().parents[2]
HOLD = ("import sys; from pathlib import Path; from klear_lab.run import run_lock\n"
        "with run_lock(Path(sys.argv[1])):\n    print('held', flush=True); sys.stdin.read()")


def stopped_run(parent: Path, name: str, status: str = "running") -> Path:
    """An SFT run with a checkpoint whose ``run.json`` says ``status``; "running" by a process that has ended."""
    run_dir = parent / name
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"ckpt")
    (run_dir / "config.yaml").write_text(f"run:\n  name: {name}\n")
    record: dict = {"status": status, "tags": ["kind:sft"]}
    if status == "running":
        ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                               text=True, check=True)
        record |= {"pid": int(ended.stdout), "host": socket.gethostname()}
    else:
        record["error"] = "RuntimeError: CUDA error: an illegal memory access was encountered"
    (run_dir / "run.json").write_text(json.dumps(record))
    return run_dir


@pytest.fixture
def resuming():
    """Start a process that holds a run's lock as ``klear-lab resume`` does; yields a function taking the run."""
    held: list[subprocess.Popen] = []

    def start(run_dir: Path) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], cwd=ROOT, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        held.append(proc)
        assert proc.stdout.readline().strip() == "held"
        return proc

    yield start
    for proc in held:
        proc.stdin.close()
        proc.wait(timeout=30)


@pytest.mark.parametrize("status", ["running", "failed"])  # running by a process gone: stopped
def test_a_run_being_resumed_is_listed_running(tmp_path, resuming, status):
    run_dir = stopped_run(tmp_path / "runs", "sft-a", status)
    (before,) = list_runs([run_dir])
    assert before.status == ("stopped" if status == "running" else "failed")
    assert f"klear-lab resume {run_dir}" in before.note
    proc = resuming(run_dir)
    (row,) = list_runs([run_dir])
    assert row.status == "running"
    assert row.note.startswith(f"being resumed (pid {proc.pid})") and "klear-lab resume" not in row.note
    proc.stdin.close()
    proc.wait(timeout=30)
    (after,) = list_runs([run_dir])
    assert after.status == before.status and after.note == before.note  # a resume that stopped: as before


def test_runs_status_filter_and_json(tmp_path, resuming, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    runs = tmp_path / "runs"
    resumed = stopped_run(runs, "sft-resumed")
    stopped_run(runs, "sft-idle")
    proc = resuming(resumed)
    assert main(["runs", str(runs), "--status", "running", "--json"]) == 0
    (listed,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert listed["run_dir"] == str(resumed) and listed["status"] == "running"
    assert listed["note"].startswith(f"being resumed (pid {proc.pid})")
    assert main(["runs", str(runs), "--status", "stopped", "--json"]) == 0
    assert [json.loads(line)["run_dir"] for line in capsys.readouterr().out.splitlines()] == [str(runs / "sft-idle")]
    assert main(["runs", str(runs)]) == 0
    out = capsys.readouterr().out
    assert f"klear-lab resume {resumed}" not in out and f"klear-lab resume {runs / 'sft-idle'}" in out


def test_no_lock_file_is_made(tmp_path):
    run_dir = stopped_run(tmp_path / "runs", "sft-never-resumed")
    (row,) = list_runs([run_dir])
    assert row.status == "stopped" and not (run_dir / ".lock").exists()
