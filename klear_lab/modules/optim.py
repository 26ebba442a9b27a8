"""AdamW with decoupled weight decay on matrices only, and warmup + cosine/constant schedules."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from klear_lab.errors import check_finite


@dataclass(frozen=True)
class OptimSettings:
    lr: float
    min_lr: float
    warmup_steps: int
    total_steps: int
    weight_decay: float
    betas: tuple[float, float]
    schedule: str = "cosine"


def lr_lambda(s: OptimSettings) -> Callable[[int], float]:
    """LR multiplier: linear warmup to 1, then cosine to ``min_lr / lr`` or constant."""
    floor = s.min_lr / s.lr if s.lr > 0 else 0.0

    def fn(step: int) -> float:
        if step < s.warmup_steps:
            return (step + 1) / max(s.warmup_steps, 1)
        if s.schedule == "constant":
            return 1.0
        progress = min(1.0, (step - s.warmup_steps) / max(s.total_steps - s.warmup_steps, 1))
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))

    return fn


def configure_adamw(model: torch.nn.Module, s: OptimSettings) -> dict:
    """Lightning ``configure_optimizers`` return value for ``model``."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW([
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": s.weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ], lr=s.lr, betas=s.betas)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(s))
    return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def check_grad_norm(trainer: Any, norm: float) -> None:
    """Stop a diverged run (:func:`~klear_lab.errors.check_finite`) before the optimizer step, except under
    ``16-mixed``, whose loss scaler skips a step of inf (still scaled) gradients itself and lowers its scale."""
    if str(trainer.precision) != "16-mixed":
        check_finite(norm, "train/grad_norm", trainer.global_step)
