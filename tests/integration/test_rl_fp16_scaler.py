"""A real RL run whose gradients go through fp16's loss scaler, on a CPU: Lightning gives CPUs no scaler
(``16-mixed`` there is unscaled), so a callback puts a CUDA-style one in before training starts."""

from __future__ import annotations

import csv
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.plugins.precision import MixedPrecision

from klear_lab.config.compose import compose
from klear_lab.run import run_experiment

ROOT = Path(__file__).resolve().parents[2]
RL = str(ROOT / "experiments/quickstart/rl.yaml")
TINY = ["model.init_from=null", "model.tiny.size=2m", "rl.steps=2", "rl.prompts_per_step=4", "rl.group_size=4",
        "rl.minibatch_prompts=2", "rl.max_new_tokens=12", "rl.group_filter=none", "rl.eval_every=0",
        "data.sources.0.n_prompts=40", "data.eval_sources.0.n_prompts=4", "eval.max_new_tokens=4",
        "trainer.checkpoint=false", "tracking.wandb.enabled=false", "trainer.log_every_n_steps=1"]


class LossScaler(L.Callback):
    """fp16 autocast and a GradScaler at 65536, as ``16-mixed`` has on a GPU."""

    def setup(self, trainer, pl_module, stage) -> None:
        scaler = torch.amp.GradScaler("cpu", init_scale=65536.0)
        trainer.strategy.precision_plugin = MixedPrecision("16-mixed", "cpu", scaler=scaler)


def grad_norms(run_dir: Path) -> list[float]:
    with (run_dir / "csv" / "metrics.csv").open(newline="") as f:
        return [float(r["rl/grad_norm"]) for r in csv.DictReader(f) if r.get("rl/grad_norm")]


def test_rl_clips_and_logs_unscaled_gradients_under_a_loss_scaler(tmp_path):
    """RL clips its gradients itself (manual optimization), where they were still multiplied by the loss scale:
    ``rl/grad_norm`` was 65536 times too large and every update was cut to 1/65536 of ``rl.grad_clip``."""
    plain = run_experiment(compose(RL, [*TINY, f"run.out_dir={tmp_path / 'plain'}"]))
    scaled = run_experiment(compose(RL, [*TINY, f"run.out_dir={tmp_path / 'scaled'}"]), callbacks=[LossScaler()])
    a, b = grad_norms(plain.run_dir), grad_norms(scaled.run_dir)
    assert len(a) == len(b) == 2
    assert b[0] == pytest.approx(a[0], rel=0.1), (a, b)  # the same weights and samples; fp16 rounding apart
