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


WRAPPERS = ("_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod")  # FSDP, checkpointing, compile


def parameter_ndims(model: torch.nn.Module) -> dict[str, int]:
    """Each parameter's number of dimensions by name, read before a strategy wraps the model: FSDP
    flattens what ``configure_optimizers`` sees into 1-D shards, where every weight would look like a bias."""
    return {_unwrapped(name): p.ndim for name, p in model.named_parameters()}


def _unwrapped(name: str) -> str:
    return ".".join(part for part in name.split(".") if part not in WRAPPERS)


def configure_adamw(model: torch.nn.Module, s: OptimSettings, ndims: dict[str, int] | None = None,
                    noise_stream: int = 0) -> dict:
    """Lightning ``configure_optimizers`` return value for ``model``: weight decay on matrices (by
    ``ndims``, :func:`parameter_ndims` of the unwrapped model, else the shapes seen now).
    ``noise_stream``: the rank where ranks hold different shards (stochastic rounding's own noise)."""
    named = [(_unwrapped(n), p) for n, p in model.named_parameters() if p.requires_grad]
    unknown = [n for n, _ in named if ndims is not None and n not in ndims]
    if unknown:
        raise RuntimeError(f"parameters not in the model when it was built: {unknown[:3]}")
    matrix = {n for n, p in named if (ndims[n] if ndims is not None else p.ndim) >= 2}
    groups = [{"params": [p for n, p in named if n in matrix], "weight_decay": s.weight_decay},
              {"params": [p for n, p in named if n not in matrix], "weight_decay": 0.0}]
    if s.bf16_rounding == "stochastic" and any(p.dtype == torch.bfloat16 for _, p in named):
        opt = StochasticRoundingAdamW(groups, seed=s.seed, stream=noise_stream, lr=s.lr, betas=s.betas)
    else:
        warn_lost_updates(groups[0]["params"], s.lr)
        opt = torch.optim.AdamW(groups, lr=s.lr, betas=s.betas)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(s))
    return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


MANTISSA_BITS = {torch.bfloat16: 7, torch.float16: 10}  # explicit ones


def half_spacing(w: torch.Tensor) -> torch.Tensor:
    """Half the gap between ``w`` (bfloat16 or float16) and the next number of its dtype: 2^(e - bits - 1)
    for |w| in [2^e, 2^(e+1)); a step below it rounds back to ``w``."""
    _, exponent = torch.frexp(w.detach().float())  # |w| = m 2^exponent, m in [0.5, 1)
    lowest = int(torch.frexp(torch.tensor(torch.finfo(w.dtype).tiny))[1])  # subnormals: the smallest normal's gap
    return torch.ldexp(torch.ones_like(w, dtype=torch.float32), exponent.clamp(min=lowest) - 2 - MANTISSA_BITS[w.dtype])


def warn_lost_updates(matrices: list[torch.Tensor], lr: float) -> None:
    """Warn when most half-precision weights would round an AdamW step (about ``lr`` in size) back to
    themselves: the run would barely train (``float16`` weights, or ``optim.bf16_rounding=nearest``)."""
    half = [p for p in matrices if p.dtype in MANTISSA_BITS and p.numel()]
    total = sum(p.numel() for p in half)
    if not total:
        return
    lost = sum(int(((half_spacing(p) > lr) & (p != 0)).sum()) for p in half) / total
    if lost > 0.5:
        warnings.warn(f"optim.lr={lr:g} with {half[0].dtype} weights: an AdamW step is below half the spacing "
                      f"between representable numbers around {lost:.0%} of the matrix weights, so it rounds back "
                      "to the weight and is lost; use bfloat16 weights with optim.bf16_rounding=stochastic, or "
                      "float32 weights (trainer.precision=bf16-mixed, model.dtype=float32)", UserWarning, stacklevel=3)


def noise_stream(trainer: Any) -> int:
    """The rank where ranks hold different shards of the weights (FSDP, DeepSpeed), else 0 (DDP: one noise)."""
    from klear_lab.distributed import data_parallel

    sharded = trainer.world_size > 1 and not data_parallel(trainer.strategy)
    return trainer.global_rank if sharded else 0


def loss_scale(trainer: Any) -> float:
    """The loss scale of ``16-mixed``'s GradScaler on a GPU, else 1.0. Under manual optimization (RL) the
    gradients are still multiplied by it when they are clipped: Lightning unscales them only inside
    ``optimizer.step()``, and unscaling them before would make that step raise (unscaled twice)."""
    scaler = getattr(trainer.precision_plugin, "scaler", None)
    return float(scaler.get_scale()) if scaler is not None and scaler.is_enabled() else 1.0


def clip_scaled_grad_norm_(params: Any, max_norm: float, scale: float = 1.0) -> torch.Tensor:
    """``clip_grad_norm_`` of gradients still multiplied by a loss ``scale``: clips them so that, unscaled,
    their norm is at most ``max_norm``, and returns the unscaled norm (before clipping). Clipping them as
    they are cut every update of a ``16-mixed`` RL run to ``max_norm / scale``, 1/65536 of it, and logged
    ``rl/grad_norm`` 65536 times too large. An overflow (inf) stays inf, and the scaler skips that step."""
    return torch.nn.utils.clip_grad_norm_(params, max_norm * scale) / scale


def check_grad_norm(trainer: Any, norm: float) -> None:
    """Stop a diverged run (:func:`~klear_lab.errors.check_finite`) before the optimizer step, except under
    ``16-mixed``, whose loss scaler skips a step of inf (still scaled) gradients itself and lowers its scale."""
    if str(trainer.precision) != "16-mixed":
        check_finite(norm, "train/grad_norm", trainer.global_step)
