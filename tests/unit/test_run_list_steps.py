"""``klear-lab runs``' steps: the steps a run has done, whichever row of ``csv/metrics.csv`` came last.

A training row of step k sits at Lightning's index k - 1 and an evaluation after k steps at k
(klear_lab/modules/eval_step.py), so the largest index said k - 1 for a run stopped after a training row
and k for one stopped after an evaluation.
"""

from __future__ import annotations

import csv
import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from klear_lab.cli import main
from klear_lab.run_list import list_runs
from klear_lab.tracking import csv_rows

ROOT = Path(__file__).resolve().parents[2]

# Rows as the project's runs write them (a real tiny SFT and RL run's, values shortened)
SETUP = {"step": 0, "data/records": 120, "plan/total_steps": 3, "perf/packing_efficiency_data": 0.99}


def lr(i: int) -> dict:  # LearningRateMonitor, as step i + 1 starts
    return {"step": i, "lr-AdamW/pg1": 1e-4, "lr-AdamW/pg2": 1e-4}


def sft_train(i: int) -> dict:  # step i + 1, done
    return {"step": i, "epoch": 0, "train/loss": 1.5, "train/grad_norm": 3.0, "train/tokens": 994,
            "perf/packing_efficiency": 0.99, "perf/tokens_per_s": 300}


def rl_train(i: int) -> dict:  # rollout step i + 1, done (a step without an update logs no train/loss)
    return {"step": i, "epoch": 0, "reward/mean": -0.5, "rl/kept_group_frac": 1.0, "rl/updates_per_step": 0,
            "perf/step_s": 0.9, "perf/time_generate_s": 0.4}


def evaluation(k: int) -> dict:  # after k steps
    return {"step": k, "val/acc": 0.25, "val/acc_macro": 0.25, "val/n": 8}


RL_START = [{"step": 0, "data/records": 8, "data/kept_frac/arith": 1.0}, evaluation(0)]
SFT_TWO_STEPS = [SETUP, lr(0), sft_train(0), lr(1), sft_train(1)]
CASES = {  # name: (status, rows, steps done)
    "sft-stopped-after-a-training-row": ("running", SFT_TWO_STEPS, 2),  # was 1
    "sft-stopped-after-an-evaluation": ("running", [*SFT_TWO_STEPS, evaluation(2)], 2),
    "sft-stopped-as-a-step-started": ("running", [*SFT_TWO_STEPS, evaluation(2), lr(2)], 2),
    "sft-merged-row": ("running", [*SFT_TWO_STEPS, lr(2), sft_train(2) | evaluation(2)], 3),  # was 2
    "sft-completed": ("completed", [*SFT_TWO_STEPS, evaluation(2), lr(2), sft_train(2), evaluation(3)], 3),
    "sft-stopped-before-a-step": ("running", [SETUP, lr(0)], 0),
    "rl-stopped-after-its-start": ("running", [*RL_START, lr(0)], 0),
    "rl-stopped-after-a-rollout-step": ("running", [*RL_START, lr(0), rl_train(0), evaluation(1), lr(1),
                                                    rl_train(1)], 2),  # was 1
    "rl-completed": ("completed", [*RL_START, lr(0), rl_train(0), evaluation(1), lr(1), rl_train(1),
                                   evaluation(2)], 2),
    "eval-run": ("completed", [evaluation(0) | {"perf/eval_seconds": 1.5, "perf/torch_threads": 2}], 0),
}


def write_csv(path: Path, rows: list[dict]) -> None:
    """``rows`` as Lightning's CSV logger writes them: every key a column (sorted), empty where not logged."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=sorted({k for row in rows for k in row}))
        writer.writeheader()
        writer.writerows(rows)


def make_run(parent: Path, name: str, status: str, rows: list[dict] | None, kind: str = "sft") -> Path:
    """A run directory whose ``run.json`` says ``status``; "running" by a process that has ended: stopped."""
    run_dir = parent / name
    run_dir.mkdir(parents=True)
    record: dict = {"status": status, "tags": [f"kind:{kind}"]}
    if status == "running":
        ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                               text=True, check=True)
        record |= {"pid": int(ended.stdout), "host": socket.gethostname()}
    (run_dir / "run.json").write_text(json.dumps(record))
    (run_dir / "config.yaml").write_text(f"run:\n  name: {name}\n")  # a resume or rerun needs it
    if rows is not None:
        write_csv(run_dir / "csv" / "metrics.csv", rows)
    return run_dir


def test_steps_done_whichever_row_came_last(tmp_path):
    runs = tmp_path / "runs"
    for name, (status, rows, _) in CASES.items():
        make_run(runs, name, status, rows, kind=name.split("-", 1)[0])
    make_run(runs, "sft-no-csv-yet", "running", None)
    listed = {Path(r.run_dir).name: r for r in list_runs([runs])}
    assert {name: listed[name].steps for name in CASES} == {name: steps for name, (_, _, steps) in CASES.items()}
    assert listed["sft-stopped-after-a-training-row"].status == "stopped"
    assert listed["sft-no-csv-yet"].steps is None


def test_the_table_and_json_name_the_steps(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    make_run(tmp_path / "runs", "sft-stopped", "running", SFT_TWO_STEPS)
    assert main(["runs", str(tmp_path / "runs"), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["steps"] == 2 and "step" not in listed
    assert main(["runs", str(tmp_path / "runs")]) == 0
    lines = capsys.readouterr().out.splitlines()
    (header,) = [[c.strip() for c in line.split("┃")] for line in lines if "┃" in line]
    (row,) = [[c.strip() for c in line.split("│")] for line in lines if "│ stopped │" in line]
    assert row[header.index("steps")] == "2"


def test_a_real_run_shows_the_steps_done_at_each_of_its_rows(tmp_path, tiny_sft_overrides, monkeypatch):
    """A tiny SFT run (3 steps, evaluated after step 2 and at the end), then its CSV cut after each row, as a
    kill would leave it: the steps shown are the training rows written (one per step) whichever row is last."""
    from klear_lab.config.compose import compose
    from klear_lab.run import run_experiment

    monkeypatch.chdir(ROOT)
    cfg = compose(ROOT / "experiments/quickstart/sft.yaml",
                  [*tiny_sft_overrides, "eval.every_n_steps=2", "tracking.wandb.enabled=false"])
    run_dir = run_experiment(cfg).run_dir
    (row,) = list_runs([run_dir])
    assert (row.status, row.steps) == ("completed", 3)
    rows = csv_rows(run_dir / "csv" / "metrics.csv")
    assert [int(r["step"]) for r in rows if r.get("val/acc")] == [2, 3]  # the layout this test is about
    assert any(r.get("lr-AdamW/pg1") for r in rows) and rows[0].get("plan/total_steps")
    cut = tmp_path / "cut"
    shown, trained = [], []
    for n in range(1, len(rows) + 1):
        shutil.rmtree(cut, ignore_errors=True)
        (cut / "csv").mkdir(parents=True)
        shutil.copy(run_dir / "run.json", cut / "run.json")
        with (cut / "csv" / "metrics.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows[:n])
        (row,) = list_runs([cut])
        shown.append(row.steps)
        trained.append(sum(bool(r.get("train/loss")) for r in rows[:n]))
    assert shown == trained  # the largest index showed 1 after the second step's training row
