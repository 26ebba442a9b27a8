"""``klear-lab compare SWEEP --rescore ...``: every finished trial scored again (avg@k), then compared.

A real sweep of two tiny SFT trials, then real eval runs of their models; a second call finds the
eval runs it made and scores nothing again; bad overrides stop before anything is scored.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
RESCORE = ["eval.samples=2", "eval.temperature=0.8"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rescore")
    overrides = ["data.sources.0.n_prompts=120", "sft.max_steps=3", "data.eval_sources.0.n_prompts=8",
                 "eval.max_new_tokens=16", "trainer.checkpoint=false", "sft.tokens_per_micro_batch=1000"]
    body = {"name": "rescored", "experiment": str(REPO / "experiments/quickstart/sft.yaml"), "overrides": overrides,
            "axes": {"optim.lr": [0.001, 0.002]}, "seeds": [0], "baseline": {"optim.lr": 0.001},
            "objective": {"metric": "val/acc", "direction": "maximize"}, "metrics": ["train/loss", "val/level1/acc"],
            "out_dir": str(tmp / "out")}
    spec = tmp / "spec.yaml"
    spec.write_text(yaml.safe_dump(body, sort_keys=False))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    done = subprocess.run([sys.executable, "-m", "klear_lab.cli_sweep", "sweep", str(spec), "--workers", "2",
                           "--no-compare"], cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return spec, tmp / "out" / "rescored"


def _eval_dirs(sweep_dir: Path) -> list[Path]:
    return sorted(p for p in (sweep_dir / "runs").iterdir() if "-eval-" in p.name)


def test_bad_overrides_score_nothing(sweep, capsys):
    from klear_lab.cli import main

    spec, sweep_dir = sweep
    assert main(["compare", str(spec), "--rescore", "eval.samples=4"]) == 2
    assert "eval.samples is 4 with eval.temperature 0" in capsys.readouterr().err
    assert main(["compare", str(spec), "--rescore", "eval.samples"]) == 2
    assert "must look like key=value" in capsys.readouterr().err
    missing = "data.eval_sources=[{name: file, path: nowhere/held_out.jsonl}]"  # failed every trial, exit 1
    assert main(["compare", str(spec), "--rescore", missing]) == 2
    assert "nowhere/held_out.jsonl" in capsys.readouterr().err
    assert _eval_dirs(sweep_dir) == [] and not list(sweep_dir.glob("rescore-*"))


def test_rescoring_scores_each_trial_once_and_tables_the_new_numbers(sweep, capsys):
    from klear_lab.cli import main

    spec, sweep_dir = sweep
    assert main(["compare", str(spec), "--rescore", *RESCORE]) == 0
    first = _eval_dirs(sweep_dir)
    assert len(first) == 2
    (out_dir,) = sweep_dir.glob("rescore-*")
    runs = json.loads((out_dir / "rescore.json").read_text())
    assert runs["overrides"] == RESCORE and sorted(map(Path, runs["eval_runs"].values())) == first
    table = pd.read_csv(out_dir / "table.csv").set_index("arm")
    for trial_run, eval_run in runs["eval_runs"].items():
        summary = json.loads((Path(eval_run) / "summary.json").read_text())
        saved = yaml.safe_load((Path(eval_run) / "config.yaml").read_text())
        assert summary["val/samples"] == 2 and saved["run"]["job_type"] == "eval"
        trial_id = json.loads((Path(trial_run) / "run.json").read_text())["run_id"]
        assert f"evaluates:{trial_id}" in saved["run"]["tags"] and len(f"evaluates:{trial_id}") <= 64
        arm = "lr=0.001" if "lr-0.001" in trial_run else "lr=0.002"
        assert table.loc[arm, "val/acc mean"] == pytest.approx(summary["val/acc"])  # the eval run's number
        assert table.loc[arm, "val/pass_at_k mean"] == pytest.approx(summary["val/pass_at_k"])
    assert "train/loss mean" not in table.columns and "val/level1/acc mean" in table.columns  # held-out only
    assert "rescored (eval.samples=2 eval.temperature=0.8)" in capsys.readouterr().out

    assert main(["compare", str(spec), "--rescore", *reversed(RESCORE)]) == 0  # same overrides, other order
    assert _eval_dirs(sweep_dir) == first and capsys.readouterr().out.count("scored before") == 2
    assert list(sweep_dir.glob("rescore-*")) == [out_dir]


def test_a_trial_run_deleted_since_counts_as_failed(sweep, capsys):
    from klear_lab.cli import main

    spec, sweep_dir = sweep
    trial = next(p for p in (sweep_dir / "runs").iterdir() if "lr-0.002" in p.name and "-eval-" not in p.name)
    (trial / "model").rename(trial / "model.moved")
    try:  # the other trial is still scored and tabled; the command says one could not be (exit 1)
        assert main(["compare", str(spec), "--rescore", "eval.samples=3", "eval.temperature=0.8"]) == 1
    finally:
        (trial / "model.moved").rename(trial / "model")
    out = capsys.readouterr()
    assert "cannot be scored, counted as failed" in out.out and "1 trial(s) could not be scored" in out.err
    (out_dir,) = [p for p in sweep_dir.glob("rescore-*") if "eval.samples=3" in (p / "table.md").read_text()]
    table = pd.read_csv(out_dir / "table.csv").set_index("arm")
    assert table.loc["lr=0.002", "failed"] == 1
    assert table.loc["lr=0.001", "n"] == 1 and table.loc["lr=0.002", "n"] == 0


def test_a_moved_sweep_scores_the_runs_in_its_own_directory(sweep, tmp_path, capsys):
    """A sweep directory copied elsewhere (its study file with it) scores its own copies of the runs."""
    import shutil

    from klear_lab.cli import main

    _, sweep_dir = sweep
    moved = tmp_path / "elsewhere" / sweep_dir.name
    shutil.copytree(sweep_dir, moved, ignore=shutil.ignore_patterns("*-eval-*", "rescore-*"))
    assert main(["compare", str(moved), "--rescore", *RESCORE]) == 0
    assert len(_eval_dirs(moved)) == 2  # written beside the copies, not into the original
    assert capsys.readouterr().out.count("rescore:") == 2
    # a copy that lost one of its runs: that trial failed, and the original's run is neither read nor written to
    partial = tmp_path / "partial" / sweep_dir.name
    shutil.copytree(moved, partial, ignore=shutil.ignore_patterns("*-eval-*", "rescore-*"))
    (gone,) = [p for p in (partial / "runs").iterdir() if "lr-0.002" in p.name]
    shutil.rmtree(gone)
    before = sorted(p.name for p in (sweep_dir / "runs").iterdir())
    assert main(["compare", str(partial), "--rescore", *RESCORE]) == 1
    assert "cannot be scored, counted as failed" in capsys.readouterr().out
    assert len(_eval_dirs(partial)) == 1 and sorted(p.name for p in (sweep_dir / "runs").iterdir()) == before


def test_an_eval_file_edited_since_is_scored_again(tmp_path, monkeypatch, tiny_sft_overrides):
    """An earlier identical eval run is reused by config hash: after an edit of its eval file, its numbers
    were for the old rows. The run's ``data`` digests tell them apart."""
    from klear_lab.config.compose import compose
    from klear_lab.run import run_experiment
    from klear_lab.stages.eval import eval_config
    from klear_lab.sweep.rescore import score

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    trained = run_experiment(compose(REPO / "experiments/quickstart/sft.yaml",
                                     [*tiny_sft_overrides, "tracking.wandb.enabled=false"])).run_dir
    data = tmp_path / "eval.jsonl"
    rows = [{"prompt": f"What is {i}+1?", "answer": str(i + 1)} for i in range(6)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    overrides = [f"run.out_dir={tmp_path / 'evals'}", f"data.eval_sources=[{{name: file, path: {data}}}]",
                 "eval.max_new_tokens=4", "tracking.wandb.enabled=false"]
    lines: list[str] = []
    _, first = score(eval_config(trained, overrides), lines.append)
    _, again = score(eval_config(trained, overrides), lines.append)
    assert again == first and "scored before" in lines[-1]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows[:4]))
    metrics, edited = score(eval_config(trained, overrides), lines.append)
    assert edited != first and lines[-1].endswith(": scoring") and metrics["val/n"] == 4


def test_a_copied_sweep_keeps_the_evaluations_it_came_with(sweep, tmp_path, capsys):
    """The eval runs of a copied (or moved) sweep directory were hashed with the path of the run they scored
    there: every trial was scored again in the copy (and ``mv`` alike)."""
    import shutil

    from klear_lab.cli import main

    spec, sweep_dir = sweep
    assert main(["compare", str(spec), "--rescore", *RESCORE]) == 0  # scored here (or before, by another test)
    copy = tmp_path / "copied" / sweep_dir.name
    shutil.copytree(sweep_dir, copy)
    capsys.readouterr()
    assert main(["compare", str(copy), "--rescore", *RESCORE]) == 0
    assert capsys.readouterr().out.count("scored before") == 2
    assert [p.name for p in _eval_dirs(copy)] == [p.name for p in _eval_dirs(sweep_dir)]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap makes the read-only mount")
def test_a_read_only_sweep_is_rescored_into_out_dir(sweep, tmp_path):
    """Refused before anything is scored, naming the directory and ``--out-dir``; with it, the eval runs and the
    table go there and the sweep directory is left as it was."""
    _, sweep_dir = sweep
    before = sorted(str(p.relative_to(sweep_dir)) for p in sweep_dir.rglob("*"))
    command = [sys.executable, "-m", "klear_lab.cli_sweep", "compare", str(sweep_dir), "--rescore",
               "eval.samples=2", "eval.temperature=0.7"]
    refused = _read_only(sweep_dir, *command)
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert f"cannot write to {sweep_dir / 'runs'}: Read-only file system" in refused.stderr
    assert "--out-dir DIR" in refused.stderr and "Traceback" not in refused.stderr
    assert "scoring" not in refused.stdout
    elsewhere = tmp_path / "mine"
    done = _read_only(sweep_dir, *command, "--out-dir", str(elsewhere))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.count(": scoring") == 2
    evals = sorted((elsewhere / "runs").iterdir())
    assert len(evals) == 2 and all((p / "summary.json").is_file() for p in evals)
    (table_dir,) = elsewhere.glob("rescore-*")
    assert sorted(map(Path, json.loads((table_dir / "rescore.json").read_text())["eval_runs"].values())) == evals
    assert sorted(str(p.relative_to(sweep_dir)) for p in sweep_dir.rglob("*")) == before


def test_evaluations_beside_the_runs_count_for_a_rescore_into_out_dir(sweep, tmp_path, capsys):
    from klear_lab.cli import main

    _, sweep_dir = sweep
    assert main(["compare", str(sweep_dir), "--rescore", *RESCORE]) == 0  # beside the runs (or before, elsewhere)
    capsys.readouterr()
    assert main(["compare", str(sweep_dir), "--rescore", *RESCORE, "--out-dir", str(tmp_path / "t")]) == 0
    assert capsys.readouterr().out.count("scored before") == 2
    assert not (tmp_path / "t" / "runs").exists() or not any((tmp_path / "t" / "runs").iterdir())
    (table_dir,) = (tmp_path / "t").glob("rescore-*")
    assert (table_dir / "table.csv").is_file() and (sweep_dir / table_dir.name / "table.csv").is_file()


def _read_only(sweep_dir: Path, *argv: str) -> subprocess.CompletedProcess:
    """``argv`` run with ``sweep_dir`` mounted read-only (bwrap: a real mount, which root cannot write either)."""
    return subprocess.run(["bwrap", "--bind", "/", "/", "--ro-bind", str(sweep_dir), str(sweep_dir), "--dev", "/dev",
                           "--proc", "/proc", *argv], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"})
