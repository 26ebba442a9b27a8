"""A run stopped by a signal (a scheduler's SIGTERM, Ctrl-C) is recorded as stopped and exits with the signal's
status (143, 130). A SIGTERM checkpoints the last step done, and the run resumes from it to the same steps, in one
process and on two DDP ranks; one during the final step lets the run finish."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest
import torch
from resume_helpers import ROOT, SFT, rows

from klear_lab.cli import main
from klear_lab.config.compose import compose
from klear_lab.resume import checkpoint_log_step, checkpoint_path
from klear_lab.run import run_experiment
from klear_lab.tracking import csv_rows


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
    (run_dir,) = [p for p in out.iterdir() if not p.name.startswith(".")]
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
    (run_dir,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    logged = [int(r["step"]) for r in csv_rows(run_dir / "csv" / "metrics.csv") if r.get("train/loss")]
    assert checkpoint_log_step(run_dir / "checkpoints" / "last.ckpt") >= logged[-1] >= 3  # at the last step
    assert not list((run_dir / "checkpoints").glob(".*.tmp"))
    done = klear_cli("resume", str(run_dir))
    assert done.returncode == 0, done.stderr[-3000:]
    assert [s for s, _ in rows(run_dir, "train/loss")] == list(range(30))  # each step once


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
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]
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
    (run_dir,) = [p for p in out.iterdir() if not p.name.startswith(".")]
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
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]
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
