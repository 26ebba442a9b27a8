"""AdamW with decoupled weight decay on matrices only (stochastic rounding for bfloat16 weights), and
warmup + cosine/constant schedules."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from klear_lab.errors import check_finite
from klear_lab.modules.bf16_adamw import StochasticRoundingAdamW


@dataclass(frozen=True)
class OptimSettings:
    lr: float
    min_lr: float
    warmup_steps: int
    total_steps: int
    weight_decay: float
    betas: tuple[float, float]
    schedule: str = "cosine"
    bf16_rounding: str = "stochastic"  # how bfloat16 weights and moments are stored (modules/bf16_adamw.py)
    seed: int = 0  # stochastic rounding's noise


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
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": s.weight_decay},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    if s.bf16_rounding == "stochastic" and any(p.dtype == torch.bfloat16 for p in params):
        opt = StochasticRoundingAdamW(groups, seed=s.seed, lr=s.lr, betas=s.betas)
    else:
        warn_lost_updates(params, s.lr)
        opt = torch.optim.AdamW(groups, lr=s.lr, betas=s.betas)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(s))
    return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


HALF_SPACING = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}  # half the gap to the next number, over |w|


def warn_lost_updates(params: list[torch.Tensor], lr: float) -> None:
    """Warn when most half-precision weights would round an AdamW step (about ``lr`` in size) back to
    themselves: the run would barely train (``float16`` weights, or ``optim.bf16_rounding=nearest``)."""
    half = [p for p in params if p.dtype in HALF_SPACING and p.ndim >= 2]
    total = sum(p.numel() for p in half)
    if not total:
        return
    lost = sum(int((p.detach().abs() * HALF_SPACING[p.dtype] > lr).sum()) for p in half) / total
    if lost > 0.5:
        warnings.warn(f"optim.lr={lr:g} with {half[0].dtype} weights: an AdamW step is below half the spacing "
                      f"between representable numbers around {lost:.0%} of the matrix weights, so it rounds back "
                      "to the weight and is lost; use bfloat16 weights with optim.bf16_rounding=stochastic, or "
                      "float32 weights (trainer.precision=bf16-mixed, model.dtype=float32)", UserWarning, stacklevel=3)


def check_grad_norm(trainer: Any, norm: float) -> None:
    """Stop a diverged run (:func:`~klear_lab.errors.check_finite`) before the optimizer step, except under
    ``16-mixed``, whose loss scaler skips a step of inf (still scaled) gradients itself and lowers its scale."""
    if str(trainer.precision) != "16-mixed":
        check_finite(norm, "train/grad_norm", trainer.global_step)
