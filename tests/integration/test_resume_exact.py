"""A stopped run resumed from ``checkpoints/last.ckpt`` takes the same remaining steps as a run that never stopped.

Each test trains once without stopping, once with a crash (an exception from a callback, or a real
``kill -9`` of the CLI) after a checkpoint, then resumes the crashed run and compares per-step metrics
and final weights. Without the data position the resumed SFT run would restart its epoch's batches
(different losses); without the RNG or evaluations in the checkpoint the RL run's samples or gain
would differ.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import torch
import yaml
from resume_helpers import RL, ROOT, SFT, Crash, rows
from safetensors.torch import load_file

from klear_lab import wandb_file
from klear_lab.cli import main
from klear_lab.config.compose import compose
from klear_lab.resume import checkpoint_log_step, resume_config
from klear_lab.resume_checkpoint import started_config
from klear_lab.run import run_experiment
from klear_lab.tracking import body_hash, csv_rows


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "model" / "model.safetensors")


def crash_then_resume(overrides: list[str], experiment: str, crash: Crash, out: Path):
    """The uninterrupted run, and the crashed run after resuming."""
    whole = run_experiment(compose(experiment, [f"run.out_dir={out / 'whole'}", *overrides]))
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_experiment(compose(experiment, [f"run.out_dir={out / 'stopped'}", *overrides]), callbacks=[crash])
    (run_dir,) = [p for p in (out / "stopped").iterdir() if not p.name.startswith(".")]
    assert json.loads((run_dir / "run.json").read_text())["status"] == "failed"
    assert not (run_dir / "summary.json").exists()
    return whole, run_dir


def assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for key in wa:
        torch.testing.assert_close(wa[key], wb[key], rtol=0, atol=1e-6, msg=key)


@pytest.mark.parametrize(("crash_at", "checkpoint", "loss"), [(5, 4, "token-mean"), (8, 7, "step-token-mean")])
def test_sft_resumed_mid_epoch_takes_the_same_steps(tmp_path, crash_at, checkpoint, loss):
    """24 prompts of 100 tokens, 4 rows per micro-batch, 2 micro-batches per step: 3 steps per epoch, 8
    steps = 3 epochs. Checkpoints are due at steps 3 and 6, each an epoch's last step, so they are written
    one step later, in the next epoch (resumed at an epoch's end, Lightning would run an empty epoch).
    ``step-token-mean`` reads each step's micro-batches ahead: a resumed run's windows are the same."""
    overrides = [f"sft.loss={loss}", "data.sources.0.n_prompts=24", "sft.max_steps=8", "sft.epochs=3",
                 "sft.grad_accum=2", "sft.tokens_per_micro_batch=400", "data.eval_sources.0.n_prompts=8",
                 "eval.max_new_tokens=16", "trainer.log_every_n_steps=1", "trainer.checkpoint_every=3"]
    whole, run_dir = crash_then_resume(overrides, SFT, Crash(crash_at, lambda t: t.global_step), tmp_path)
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == checkpoint
    resumed = run_experiment(resume_config(run_dir), resume=run_dir)

    assert resumed.run_dir == run_dir
    assert rows(run_dir, "train/loss") == rows(whole.run_dir, "train/loss")  # every step once, same values
    assert [s for s, _ in rows(run_dir, "train/loss")] == list(range(8))
    assert_same_weights(whole.run_dir, run_dir)
    assert resumed.metrics["train/steps"] == 8 and resumed.metrics["val/acc"] == whole.metrics["val/acc"]
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "completed" and record["attempts"] == 2
    assert record["git_commits"] == [record["git_commit"]] * 2  # one per attempt
    before = [(int(r["step"]), float(r["train/loss"])) for r in
              csv.DictReader((run_dir / "csv" / "metrics.before-resume-1.csv").open()) if r.get("train/loss")]
    assert len(before) >= 4 and before == rows(whole.run_dir, "train/loss")[:len(before)]  # up to the checkpoint
    runs = sorted((run_dir / "wandb").glob("offline-run-*"))
    # one W&B run id; W&B adds "-1" to a directory whose attempt started in the same second as the first
    named = re.compile(rf"offline-run-\d{{8}}_\d{{6}}-{re.escape(record['run_id'])}(-\d+)?")
    assert len(runs) == 2 and all(named.fullmatch(r.name) for r in runs), [r.name for r in runs]
    # what `wandb sync` uploads, the segments one after the other: each metric at each step as often as the
    # CSV has it: once (the learning rate too, with 2 micro-batches per step), the replayed steps too
    history = [row for r in runs for row in wandb_file.history(next(r.glob("run-*.wandb")))]
    table = list(csv.DictReader((run_dir / "csv" / "metrics.csv").open()))
    in_csv = Counter((int(row["step"]), k) for row in table for k, v in row.items() if v != "" and k != "step")
    in_wandb = Counter((row.get("trainer/global_step", 0), k) for row in history for k in row if k in table[0])
    assert in_wandb == in_csv
    assert {n for (_, key), n in in_csv.items() if key != "epoch"} == {1}  # epoch: in train and val rows
    logged = [(row["trainer/global_step"], row["train/loss"]) for row in history if "train/loss" in row]
    assert [step for step, _ in logged] == list(range(8))
    assert [loss for _, loss in logged] == pytest.approx([loss for _, loss in rows(run_dir, "train/loss")], rel=1e-6)


def test_sft_evaluates_after_every_nth_step_over_short_windows_and_resumes_exactly(tmp_path):
    """10 prompts, 2 rows per micro-batch: 5 micro-batches per epoch, so 3 steps of grad_accum 2, the last of
    one micro-batch. Lightning's interval (in micro-batches, counted over epochs) evaluated mid-step past the
    first epoch, missed the one due after the last step, and a checkpoint written with such an evaluation
    resumed to other weights (a micro-batch's accumulated gradient was lost). Now evaluations follow steps
    2, 4 and 6; the checkpoint due at step 4 is written with its evaluation, and the resume restarts there."""
    overrides = ["data.sources.0.n_prompts=10", "sft.epochs=2", "sft.tokens_per_micro_batch=200", "sft.grad_accum=2",
                 "data.eval_sources.0.n_prompts=8", "eval.max_new_tokens=8", "eval.every_n_steps=2",
                 "trainer.checkpoint_every=2", "trainer.log_every_n_steps=1"]
    whole, run_dir = crash_then_resume(overrides, SFT, Crash(5, lambda t: t.global_step), tmp_path)
    assert whole.metrics["plan/steps_per_epoch"] == 3 and whole.metrics["train/steps"] == 6
    # an evaluation's row sits at the steps done (a training row, Lightning's, at its step's 0-based index)
    assert [s for s, _ in rows(whole.run_dir, "val/acc")] == [2, 4, 6]
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["global_step"] == 4 and ckpt["klear_resume"]["epoch"] == 1  # mid second epoch, after an evaluation
    resumed = run_experiment(resume_config(run_dir), resume=run_dir)
    assert_same_weights(whole.run_dir, run_dir)
    assert rows(run_dir, "val/acc") == rows(whole.run_dir, "val/acc")  # step 4's evaluation not run twice
    assert rows(run_dir, "train/loss") == rows(whole.run_dir, "train/loss")
    assert resumed.metrics["train/tokens"] == whole.metrics["train/tokens"]  # counted on after the resume


def test_rl_resumed_run_samples_and_evaluates_like_an_uninterrupted_one(tmp_path):
    """With rollout sampling, a KL reference, evaluations every 2 steps and a checkpoint every 2 steps."""
    overrides = ["model.init_from=null", "model.tiny.size=2m", "rl.steps=6", "rl.prompts_per_step=4",
                 "rl.group_size=4", "rl.minibatch_prompts=2", "rl.max_new_tokens=16", "rl.eval_every=2",
                 "rl.group_filter=none", "rl.kl_coef=0.01", "data.sources.0.n_prompts=40",
                 "data.eval_sources.0.n_prompts=8", "eval.max_new_tokens=8", "trainer.checkpoint_every=2",
                 "trainer.log_every_n_steps=1", "tracking.wandb.enabled=false"]
    batches = lambda t: t.fit_loop.epoch_loop.batch_progress.total.processed  # noqa: E731 - rollout steps
    whole, run_dir = crash_then_resume(overrides, RL, Crash(3, batches), tmp_path)
    saved = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert [step for step, *_ in saved["klear_rl_evals"]] == [0, saved["global_step"]]  # start, and step 2's
    started = json.loads((run_dir / "run.json").read_text())["config_hash"]  # what resume names changes against
    assert body_hash(started_config(run_dir / "checkpoints" / "last.ckpt")) == started

    resumed = run_experiment(resume_config(run_dir), resume=run_dir)
    for key in ("rl/grad_norm", "reward/mean", "rl/response_len_mean", "val/acc"):
        assert rows(run_dir, key) == rows(whole.run_dir, key), key
    assert_same_weights(whole.run_dir, run_dir)
    for key in ("val/acc_start", "val/acc_final", "val/acc_best", "train/steps"):
        assert resumed.metrics[key] == whole.metrics[key], key


def kill_after_first_checkpoint(args: list[str], out: Path, row_key: str | None = None) -> Path:
    """Start ``klear-lab ARGS`` (its own process group), ``kill -9`` every process of it half a second
    after its first checkpoint (with ``row_key``: once ``metrics.csv`` has that metric at a step past the
    checkpoint's, which only a file written as steps finish has before the next checkpoint); return the
    run directory."""
    # without WANDB_SERVICE: a run logging through this process's W&B service stays "in use" there once killed
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "KLEAR_RUN_DIR", "WANDB_SERVICE")}
    proc = subprocess.Popen([sys.executable, "-m", "klear_lab.cli", *args], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while not list(out.glob("*/checkpoints/last.ckpt")) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be killed"
    (run_dir,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    assert main(["resume", str(run_dir)]) == 2  # refused: the run is alive (its pid, this machine)
    time.sleep(0.5)  # into a later step
    if row_key is not None:
        first = checkpoint_log_step(run_dir / "checkpoints" / "last.ckpt")
        while not [r for r in csv_rows(run_dir / "csv" / "metrics.csv") if r.get(row_key) and int(r["step"]) > first]:
            assert proc.poll() is None and time.time() < deadline, "no row after the checkpoint's step"
            assert checkpoint_log_step(run_dir / "checkpoints" / "last.ckpt") == first, \
                "the next checkpoint came before any row past the first: metrics.csv is not written per step"
            time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)  # DDP: rank 1 too
    proc.wait()
    if row_key is not None:
        assert checkpoint_log_step(run_dir / "checkpoints" / "last.ckpt") == first, \
            "a second checkpoint was written before the kill: space trainer.checkpoint_every wider"
    assert json.loads((run_dir / "run.json").read_text())["status"] == "running"  # killed: nothing ran after
    return run_dir


def test_a_killed_cli_run_resumes_from_the_command_line(tmp_path, capsys):
    """``kill -9`` mid-run (after a checkpoint, during a later step), ``klear-lab runs`` finds it stopped,
    then ``klear-lab resume RUN_DIR``."""
    out = tmp_path / "runs"
    run_dir = kill_after_first_checkpoint(
        ["train", SFT, f"run.out_dir={out}", "data.sources.0.n_prompts=400", "sft.max_steps=120",
         "sft.tokens_per_micro_batch=400", "data.eval_sources.0.n_prompts=8", "eval.max_new_tokens=16",
         # checkpoints at steps 39 and 79: the kill comes a few steps after the first, seconds before the second
         "trainer.checkpoint_every=40", "trainer.log_every_n_steps=1"], out, row_key="train/loss")
    before = [int(r["step"]) for r in csv_rows(run_dir / "csv" / "metrics.csv") if r.get("train/loss")]
    assert before == list(range(before[-1] + 1))  # every step the killed run finished, past its checkpoint
    assert before[-1] > checkpoint_log_step(run_dir / "checkpoints" / "last.ckpt")
    capsys.readouterr()
    assert main(["runs", str(out), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert (listed["status"], listed["steps"], listed["note"]) == (  # the last row at step index i: i + 1 done
        "stopped", before[-1] + 1, f"klear-lab resume {run_dir}")
    threads = torch.get_num_threads()
    try:  # a bigger or smaller machine: the resume may change how the run executes
        assert main(["resume", str(run_dir), "trainer.num_threads=1"]) == 0
    finally:
        torch.set_num_threads(threads)
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["trainer"]["num_threads"] == 1
    kept = run_dir / "csv" / "metrics.before-resume-1.csv"
    assert [int(r["step"]) for r in csv_rows(kept) if r.get("train/loss")] == before  # kept whole
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["train/steps"] == 120 and summary["perf/torch_threads"] == 1
    steps = [s for s, _ in rows(run_dir, "train/loss")]
    assert steps == sorted(set(steps)) and steps[-1] == 119  # no step twice after the resume
    assert json.loads((run_dir / "run.json").read_text())["attempts"] == 2
    capsys.readouterr()
    assert main(["runs", str(out), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert (listed["status"], listed["attempts"], listed["steps"]) == ("completed", 2, 120)
    # W&B: the killed attempt's run file holds what W&B had flushed (often nothing); the resumed one logs
    # the kept rows it lacks, then every later step once: the two files together have each step once
    files = [next(d.glob("run-*.wandb")) for d in sorted((run_dir / "wandb").glob("offline-run-*"))]
    logged = [(row["trainer/global_step"], row["train/loss"]) for f in files for row in wandb_file.history(f)
              if "train/loss" in row]
    assert len(files) == 2 and [s for s, _ in logged] == list(range(120))
    assert [v for _, v in logged] == pytest.approx([v for _, v in rows(run_dir, "train/loss")], rel=1e-6)


def test_a_killed_two_rank_rl_run_resumes_on_two_ranks(tmp_path, klear_cli):
    """Under DDP, rank 1 (Lightning runs ``klear-lab resume RUN_DIR`` again for it) loads the same checkpoint.

    The kill waits for a row past the first checkpoint's step and lands well before the next checkpoint. A
    kill between a checkpoint and its step's CSV row lost that row (the checkpoint was put in place in
    ``on_train_batch_end``, before Lightning logs the step; with ``checkpoint_every=2`` and a kill 0.5 s after
    the first one this test failed so in CI); it is now renamed into place after the row
    (``test_checkpoint_rows.py``)."""
    out = tmp_path / "runs"
    run_dir = kill_after_first_checkpoint(
        ["train", RL, f"run.out_dir={out}", "model.init_from=null", "model.tiny.size=2m", "rl.steps=10",
         "rl.prompts_per_step=4", "rl.group_size=4", "rl.minibatch_prompts=2", "rl.max_new_tokens=16",
         "rl.eval_every=0", "rl.group_filter=none", "data.sources.0.n_prompts=40", "data.eval_sources.0.n_prompts=8",
         "eval.max_new_tokens=8", "trainer.checkpoint_every=4", "trainer.log_every_n_steps=1",
         "trainer.accelerator=cpu", "trainer.devices=2", "trainer.strategy=ddp", "tracking.wandb.enabled=false"], out,
        row_key="rl/grad_norm")
    done = klear_cli("resume", str(run_dir))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("run finished") == 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["perf/world_size"] == 2 and summary["train/steps"] == 20  # 10 steps x 2 updates
    steps = [s for s, _ in rows(run_dir, "rl/grad_norm")]
    assert steps == list(range(10))  # every rollout step logged once across both attempts
