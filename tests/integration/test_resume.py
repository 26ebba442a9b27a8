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

import lightning as L
import pytest
import torch
import yaml
from safetensors.torch import load_file

from klear_lab import wandb_file
from klear_lab.cli import main
from klear_lab.config.compose import compose
from klear_lab.errors import ConfigError
from klear_lab.resume import checkpoint_log_step, checkpoint_path, resumable_twins, resume_config
from klear_lab.run import run_experiment
from klear_lab.tracking import csv_rows

ROOT = Path(__file__).resolve().parents[2]

SFT = str(ROOT / "experiments/quickstart/sft.yaml")
RL = str(ROOT / "experiments/quickstart/rl.yaml")


class Crash(L.Callback):
    """Raise at the end of the training batch where ``count(trainer)`` reaches ``at`` (once)."""

    def __init__(self, at: int, count) -> None:
        self.at, self.count = at, count

    def on_train_batch_end(self, trainer, *args) -> None:
        if self.count(trainer) == self.at:
            raise RuntimeError("simulated crash")


def rows(run_dir: Path, key: str) -> list[tuple[int, float]]:
    with (run_dir / "csv" / "metrics.csv").open(newline="") as f:
        return [(int(r["step"]), float(r[key])) for r in csv.DictReader(f) if r.get(key)]


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "model" / "model.safetensors")


def crash_then_resume(overrides: list[str], experiment: str, crash: Crash, out: Path):
    """The uninterrupted run, and the crashed run after resuming."""
    whole = run_experiment(compose(experiment, [f"run.out_dir={out / 'whole'}", *overrides]))
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_experiment(compose(experiment, [f"run.out_dir={out / 'stopped'}", *overrides]), callbacks=[crash])
    (run_dir,) = (out / "stopped").iterdir()
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
    (run_dir,) = out.iterdir()
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
    assert (listed["status"], listed["step"], listed["note"]) == ("stopped", before[-1], f"klear-lab resume {run_dir}")
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
    assert (listed["status"], listed["attempts"], listed["step"]) == ("completed", 2, 120)  # the final evaluation
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


def test_resume_refuses_what_it_cannot_continue(tmp_path, tiny_sft_overrides, capsys):
    done = run_experiment(compose(SFT, tiny_sft_overrides))
    assert main(["resume", str(done.run_dir)]) == 2
    assert "already completed" in capsys.readouterr().err

    record = json.loads((done.run_dir / "run.json").read_text())
    (done.run_dir / "run.json").write_text(json.dumps({**record, "status": "failed"}))
    assert main(["resume", str(done.run_dir)]) == 2  # trainer.checkpoint=false in these overrides
    assert "no checkpoint to resume from" in capsys.readouterr().err
    assert main(["resume", str(done.run_dir), "optim.lr=0.1"]) == 2  # changes what the run computes
    assert "'optim.lr=0.1': a resumed run keeps its config; only trainer.num_threads" in capsys.readouterr().err

    assert main(["resume", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_the_api_resume_checks_what_the_cli_checks(tmp_path, tiny_sft_overrides):
    """``run_experiment(cfg, resume=DIR)`` trained the old checkpoint under any cfg and rewrote its config.yaml."""
    from klear_lab.errors import ConfigError

    overrides = [o for o in tiny_sft_overrides if not o.startswith("trainer.checkpoint")]
    overrides += ["trainer.checkpoint_every=2", "sft.max_steps=4"]
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_experiment(compose(SFT, overrides), callbacks=[Crash(3, lambda t: t.global_step)])
    (run_dir,) = (tmp_path / "runs").glob("*/")
    saved = (run_dir / "config.yaml").read_bytes()
    for change, needle in [("optim.lr=0.1", "hashes to"), ("run.seed=7", "run.seed=0")]:
        with pytest.raises(ConfigError, match=needle):
            run_experiment(compose(SFT, [*overrides, change]), resume=run_dir)
    assert (run_dir / "config.yaml").read_bytes() == saved
    done = run_experiment(compose(SFT, overrides), resume=run_dir)  # the same config continues
    assert json.loads((done.run_dir / "run.json").read_text())["status"] == "completed"
    with pytest.raises(ConfigError, match="already completed"):
        run_experiment(compose(SFT, overrides), resume=run_dir)
    with pytest.raises(ConfigError, match="typo: no such directory"):
        run_experiment(compose(SFT, overrides), resume=tmp_path / "typo")


def test_a_resume_on_edited_data_is_refused(tmp_path, tiny_sft_overrides):
    """The config names a data file, not its contents: an edited file resumed the run on other records
    under the same config hash. ``run.json`` keeps the records' digests; the original file resumes."""
    from klear_lab import builders
    from klear_lab.errors import ConfigError

    records, _ = builders.build_train_records(compose(SFT, tiny_sft_overrides))
    data = tmp_path / "sft.jsonl"
    original = "".join(json.dumps(r.to_dict()) + "\n" for r in records)
    data.write_text(original)
    overrides = [o for o in tiny_sft_overrides if not o.startswith("trainer.checkpoint")]
    overrides += ["trainer.checkpoint_every=2", "sft.max_steps=4", f"data.sources=[{{name: file, path: {data}}}]"]
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_experiment(compose(SFT, overrides), callbacks=[Crash(3, lambda t: t.global_step)])
    (run_dir,) = (tmp_path / "runs").glob("*/")
    started = json.loads((run_dir / "run.json").read_text())["data"]
    assert set(started) == {"train", "eval"}

    lines = original.splitlines(keepends=True)
    edited = {**json.loads(lines[7]), "response": json.loads(lines[7])["response"] + " "}
    data.write_text("".join(lines[:7]) + json.dumps(edited) + "\n" + "".join(lines[8:]))
    kept = {name: (run_dir / name).read_bytes() for name in ("run.json", "config.yaml", "csv/metrics.csv")}
    with pytest.raises(ConfigError, match=rf"data.sources: {started['train']} at the start, [0-9a-f]{{16}} now"):
        run_experiment(compose(SFT, overrides), resume=run_dir)
    assert {name: (run_dir / name).read_bytes() for name in kept} == kept  # refused before anything is written
    # a sweep's retry of the killed trial starts it over in a new run (else every rerun picked it, and was refused)
    from klear_lab.sweep.spec import DEFAULT_RUNNER
    from klear_lab.sweep.trial import run_or_start_over

    fresh = run_or_start_over({"runner": DEFAULT_RUNNER, "resume": str(run_dir)}, compose(SFT, overrides), [])
    fresh_data = json.loads((fresh.run_dir / "run.json").read_text())["data"]
    assert fresh.run_dir != run_dir and fresh_data["train"] != started["train"]

    data.write_text(original)
    done = run_experiment(compose(SFT, overrides), resume=run_dir)
    record = json.loads((done.run_dir / "run.json").read_text())
    assert record["status"] == "completed" and record["data"] == started


def test_a_fresh_init_from_config_is_the_run_that_resolved_it(tmp_path):
    """An RL trial with model.init_from saved the parent's run as model.name_or_path, so its sweep retry (a fresh
    config) never matched the killed run's hash and started over."""
    from klear_lab.resume import as_resolved
    from klear_lab.tracking import config_hash

    fresh = compose(RL, [f"run.out_dir={tmp_path}"])
    assert fresh["model"]["init_from"] and not fresh["model"]["name_or_path"]
    started = {**fresh, "model": {**fresh["model"], "name_or_path": str(tmp_path / "parent-run")}}
    assert config_hash(fresh) != config_hash(started)
    assert config_hash(as_resolved(fresh, started["model"])) == config_hash(started)
    other = {**started["model"], "init_from": str(tmp_path / "other.yaml")}
    assert config_hash(as_resolved(fresh, other)) != config_hash(started)


def sigterm_after_rows(args: list[str], out: Path, n: int, timeout: float, to_rank: int = 0) -> str:
    """Run ``klear-lab`` with ``args`` in a subprocess, send SIGTERM once ``n`` train rows are logged (to the
    launching process, or to the DDP process of ``to_rank``), and return its stderr once it has exited 143."""
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "KLEAR_RUN_DIR", "WANDB_SERVICE")}
    proc = subprocess.Popen([sys.executable, "-m", "klear_lab.cli", *args], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 300
    while len(list(out.glob("*/csv/metrics.csv"))) == 0 or len(
            [r for r in csv_rows(next(out.glob("*/csv/metrics.csv"))) if r.get("train/loss")]) < n:
        assert proc.poll() is None and time.time() < deadline, "the run ended before it could be stopped"
        time.sleep(0.2)
    os.kill(proc.pid if to_rank == 0 else rank_pid(proc.pid, to_rank), signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    assert proc.returncode == 143, err.decode()[-3000:]
    return err.decode()


def rank_pid(pid: int, rank: int) -> int:
    """The pid of the DDP process of ``rank`` that Lightning's launcher in process ``pid`` started."""
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        environ = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        if f"LOCAL_RANK={rank}".encode() in environ:
            return int(child)
    raise AssertionError(f"no child of {pid} runs rank {rank}")


@pytest.mark.parametrize("evals", ["eval.every_n_steps=0", "eval.every_n_steps=1"])
def test_sigterm_saves_a_checkpoint_and_exits_143(tmp_path, capsys, evals):
    """A preempted run (SIGTERM) exited 0, as if it had finished, and lost the steps since its last checkpoint.
    With an evaluation after every step, the checkpoint is written before it (at scale it outlasts a grace
    period)."""
    out = tmp_path / "runs"
    args = ["train", SFT, f"run.out_dir={out}", "data.sources.0.n_prompts=400", "sft.max_steps=40",
            "sft.tokens_per_micro_batch=400", "sft.grad_accum=2", "data.eval_sources.0.n_prompts=8",
            "eval.max_new_tokens=16", "trainer.checkpoint_every=1000", "trainer.log_every_n_steps=1", evals]
    sigterm_after_rows(args, out, 5, timeout=120)
    (run_dir,) = out.iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    assert (record["status"], record["error"]) == ("failed", "terminated (SIGTERM)")
    logged = [int(r["step"]) for r in csv_rows(run_dir / "csv" / "metrics.csv") if r.get("train/loss")]
    assert checkpoint_log_step(run_dir / "checkpoints" / "last.ckpt") >= logged[-1] >= 4  # at the last step
    capsys.readouterr()
    assert main(["runs", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["note"].endswith(f"klear-lab resume {run_dir}")
    assert main(["resume", str(run_dir)]) == 0
    whole = run_experiment(compose(SFT, [*[a for a in args[2:] if "out_dir" not in a], f"run.out_dir={tmp_path}/w"]))
    assert [s for s, _ in rows(run_dir, "train/loss")] == list(range(40))  # each step once, and the same steps:
    resumed, reference = ([v for _, v in rows(d, "train/loss")] for d in (run_dir, whole.run_dir))
    assert resumed == pytest.approx(reference, rel=1e-5)


@pytest.mark.parametrize("to_rank", [0, 1])
def test_sigterm_on_two_ranks_checkpoints_the_last_step_and_resumes(tmp_path, klear_cli, to_rank):
    """Under DDP Lightning's SIGTERM handler broadcast from inside the signal handler, at whatever point each
    rank was: the run hung (1 in 4 tries, and once in CI). Every rank now only notes the signal, the ranks
    agree at each step's end, and all stop after the same step with its checkpoint in place. Rank 0 gets
    the signal as a scheduler's first signal reaches the job's main process; rank 1 alone, as a signal to
    one worker does: rank 0 is told by the agreement (no signal to forward). Lightning's handler hung there."""
    out = tmp_path / "runs"
    args = ["train", SFT, f"run.out_dir={out}", "data.sources.0.n_prompts=400", "sft.max_steps=30",
            "sft.tokens_per_micro_batch=400", "data.eval_sources.0.n_prompts=8", "eval.max_new_tokens=8",
            "trainer.checkpoint_every=1000", "trainer.log_every_n_steps=1", "trainer.accelerator=cpu",
            "trainer.devices=2", "trainer.strategy=ddp", "tracking.wandb.enabled=false"]
    err = sigterm_after_rows(args, out, 4, timeout=180, to_rank=to_rank)
    assert err.count("klear-lab: terminated (SIGTERM)") == 1  # said once, not once per rank
    (run_dir,) = out.iterdir()
    logged = [int(r["step"]) for r in csv_rows(run_dir / "csv" / "metrics.csv") if r.get("train/loss")]
    assert checkpoint_log_step(run_dir / "checkpoints" / "last.ckpt") >= logged[-1] >= 3  # at the last step
    assert not list((run_dir / "checkpoints").glob(".*.tmp"))
    done = klear_cli("resume", str(run_dir))
    assert done.returncode == 0, done.stderr[-3000:]
    assert [s for s, _ in rows(run_dir, "train/loss")] == list(range(30))  # each step once


def test_a_second_resume_of_one_run_is_refused_while_the_first_holds_it(tmp_path, tiny_sft_overrides):
    """Two resumes started while the first was still building its run (run.json not yet "running") both
    passed the checks and wrote one run's CSV, checkpoint and W&B id."""
    import fcntl

    from klear_lab.errors import ConfigError

    overrides = [o for o in tiny_sft_overrides if not o.startswith("trainer.checkpoint")]
    overrides += ["trainer.checkpoint_every=2", "sft.max_steps=4"]
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_experiment(compose(SFT, overrides), callbacks=[Crash(3, lambda t: t.global_step)])
    (run_dir,) = (tmp_path / "runs").glob("*/")
    with open(run_dir / ".lock", "w") as held:  # what a resume in another process holds
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(ConfigError, match="another process is resuming this run"):
            run_experiment(compose(SFT, overrides), resume=run_dir)
    assert run_experiment(compose(SFT, overrides), resume=run_dir).metrics["train/steps"] == 4  # released


class CtrlC(L.Callback):
    """Ctrl-C at the end of training step ``at``, as the default SIGINT handler raises it."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.global_step == self.at:
            raise KeyboardInterrupt


def test_ctrl_c_is_recorded_as_an_interruption_and_leaves_ctrl_c_working(tmp_path, tiny_sft_overrides):
    """Lightning turns a Ctrl-C inside fit into sys.exit(1): the run was recorded as "SystemExit: 1". It
    ignores SIGINT while it shuts down, and its teardown gives the process (a notebook, the next run)
    its handler back."""
    before = signal.getsignal(signal.SIGINT)
    assert before is not signal.SIG_IGN
    with pytest.raises(SystemExit):
        run_experiment(compose(SFT, tiny_sft_overrides), callbacks=[CtrlC(2)])
    assert signal.getsignal(signal.SIGINT) is before
    (run_dir,) = (tmp_path / "runs").iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    assert (record["status"], record["error"]) == ("failed", "interrupted (Ctrl-C)")


def test_ctrl_c_on_the_command_line_exits_130(tmp_path):
    out = tmp_path / "runs"
    args = ["train", SFT, f"run.out_dir={out}", "data.sources.0.n_prompts=400", "sft.max_steps=400",
            "sft.tokens_per_micro_batch=400", "trainer.log_every_n_steps=1", "trainer.checkpoint=false"]
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "KLEAR_RUN_DIR", "WANDB_SERVICE")}
    proc = subprocess.Popen([sys.executable, "-m", "klear_lab.cli", *args], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 300
    while not any(r.get("train/loss") for f in out.glob("*/csv/metrics.csv") for r in csv_rows(f)):
        assert proc.poll() is None and time.time() < deadline, "the run ended before it could be stopped"
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "klear-lab: interrupted" in err.decode(), err.decode()[-2000:]
    (run_dir,) = out.iterdir()
    assert json.loads((run_dir / "run.json").read_text())["error"] == "interrupted (Ctrl-C)"


class SigtermAtEpochEnd(L.Callback):
    """SIGTERM to this process at the end of the first epoch's last batch (as a preemption might send it)."""

    def __init__(self) -> None:
        self.sent_at: int | None = None

    def on_train_batch_end(self, trainer, *args) -> None:
        if self.sent_at is None and trainer.fit_loop.epoch_loop.batch_progress.is_last_batch:
            self.sent_at = trainer.global_step
            os.kill(os.getpid(), signal.SIGTERM)


def test_a_sigterm_at_an_epochs_last_batch_checkpoints_the_next_step(tmp_path, tiny_sft_overrides):
    """Lightning stopped at once and nothing could be written there (a checkpoint at an epoch's last batch
    cannot be resumed): the run lost every step since its last checkpoint. Now it takes one more step."""
    overrides = [o for o in tiny_sft_overrides if not o.startswith(("trainer.checkpoint", "sft.max_steps"))]
    overrides += ["trainer.checkpoint_every=1000", "sft.max_steps=12", "data.sources.0.n_prompts=60"]
    whole = run_experiment(compose(SFT, [*overrides, f"run.out_dir={tmp_path / 'whole'}"]))
    stop = SigtermAtEpochEnd()
    with pytest.raises(SystemExit):
        run_experiment(compose(SFT, overrides), callbacks=[stop])
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert json.loads((run_dir / "run.json").read_text())["error"] == "terminated (SIGTERM)"
    assert 0 < stop.sent_at < 12 and checkpoint_log_step(run_dir / "checkpoints" / "last.ckpt") == stop.sent_at
    assert signal.getsignal(signal.SIGTERM) is not None  # handed back
    run_experiment(compose(SFT, overrides), resume=run_dir)
    resumed, reference = ([v for _, v in rows(d, "train/loss")] for d in (run_dir, whole.run_dir))
    assert resumed == pytest.approx(reference, rel=1e-5) and len(reference) == 12


class SigtermInStep(L.Callback):
    """SIGTERM to this process at the start of the batch that takes optimizer step ``at`` + 1."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_train_batch_start(self, trainer, *args) -> None:
        if trainer.global_step == self.at:
            os.kill(os.getpid(), signal.SIGTERM)


def test_no_checkpoint_at_the_final_step_and_a_sigterm_there_lets_the_run_finish(tmp_path, tiny_sft_overrides,
                                                                                 capsys):
    """``sft.max_steps`` ending mid-epoch: a checkpoint due at the final step (or one a SIGTERM during it
    called for) was written there, and the SIGTERM failed a run whose training was done (no final evaluation,
    no model). Resumed from it, the run trained no step: its summary lost train/* and logged val/* a step early."""
    overrides = [o for o in tiny_sft_overrides if not o.startswith(("trainer.checkpoint", "sft.max_steps"))]
    overrides += ["trainer.checkpoint_every=4", "sft.max_steps=8", "data.sources.0.n_prompts=300"]
    result = run_experiment(compose(SFT, overrides), callbacks=[SigtermInStep(7)])
    record = json.loads((result.run_dir / "run.json").read_text())
    assert record["status"] == "completed" and (result.run_dir / "model" / "model.safetensors").is_file()
    assert result.metrics["train/steps"] == 8 and "train/loss" in result.metrics
    assert [s for s, _ in rows(result.run_dir, "val/acc")] == [8]
    assert torch.load(checkpoint_path(result.run_dir), weights_only=True)["global_step"] == 4  # not 8
    assert signal.getsignal(signal.SIGTERM) is not None  # handed back
    assert "SIGTERM during the last training step" in capsys.readouterr().err


def test_running_a_stopped_runs_command_again_names_the_run_to_resume(tmp_path, tiny_sft_overrides, capsys):
    """The same command after a Ctrl-C or crash started over in a new directory without a word (found by a
    new-user walkthrough); it still starts over, and says which run `klear-lab resume` would continue."""
    overrides = [*tiny_sft_overrides, "trainer.checkpoint=true", "trainer.checkpoint_every=1", "sft.max_steps=4"]
    steps = lambda t: t.global_step  # noqa: E731
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_experiment(compose(SFT, overrides), callbacks=[Crash(2, steps)])
    (stopped,) = (tmp_path / "runs").iterdir()
    assert "note:" not in capsys.readouterr().err
    assert not resumable_twins(compose(SFT, [*overrides, "sft.max_steps=3"]))  # another config: not its run
    from klear_lab.stages.eval import eval_config

    with pytest.raises(ConfigError, match=rf"only a completed run has a final model to score \(`klear-lab resume "
                                          rf"{stopped}` continues it\)"):
        eval_config(stopped)  # it can resume: the refusal says how
    again = run_experiment(compose(SFT, overrides))
    err = capsys.readouterr().err
    assert f"note: {stopped} is an earlier run of this config and seed" in err and f"klear-lab resume {stopped}" in err
    assert again.run_dir != stopped and again.metrics["train/steps"] == 4
