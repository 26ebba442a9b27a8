"""Shared pieces of the clip variants: output type, ratio, PPO surrogate, dual clip, metrics.

Conventions: ``loss`` is what is MINIMISED (the negated surrogate objective), per token, already
multiplied by the mask. Metrics are detached 0-d tensors, masked over valid tokens:

- ``clipfrac_low`` / ``clipfrac_high``: share of tokens whose lower / upper bound is active
  (for PPO-style variants: ratio < 1 - eps_low with adv < 0 / ratio > 1 + eps_high with adv > 0,
  i.e. verl's ``pg_clipfrac`` split by side); ``clipfrac``: either side.
- ``clipfrac_dual``: share of tokens hit by the dual clip (adv < 0, ratio > c); 0 when off.
- ``ratio_mean`` / ``ratio_min`` / ``ratio_max``: importance ratio pi / pi_old.
- ``approx_kl``: mean of 0.5 * (logp - old_logp)^2 (the k2 estimator, always >= 0; verl's
  ``ppo_kl`` reports k1 = mean(old_logp - logp) instead).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from klear_lab.errors import ComponentError, component_error, probe_failure

# verl clamps the token log-ratio to +-20 before exp (compute_policy_loss_vanilla)
LOG_RATIO_CLAMP = 20.0

METRIC_KEYS = (
    "clipfrac_low",
    "clipfrac_high",
    "clipfrac",
    "clipfrac_dual",
    "ratio_mean",
    "ratio_min",
    "ratio_max",
    "approx_kl",
)


@dataclass(frozen=True)
class ClipOutput:
    """Result of a clip variant.

    Attributes:
        loss: Per-token loss to minimise, zero at padding. Shape: [N, T].
        metrics: Detached scalar metrics, keys :data:`METRIC_KEYS`.
    """

    loss: Tensor
    metrics: dict[str, Tensor]


def check_eps(name: str, value: float, upper: float | None = 1.0) -> None:
    """Raise ``ValueError`` unless ``0 < value < upper`` (``upper=None``: only ``value > 0``)."""
    if value <= 0 or (upper is not None and value >= upper):
        bound = f"(0, {upper})" if upper is not None else "(0, inf)"
        raise ValueError(f"{name} must be in {bound}, got {value}")


def check_dual_clip(c: float | None) -> None:
    """Dual-clip constant must be > 1 (Ye et al. 2020; verl asserts the same)."""
    if c is not None and not c > 1.0:
        raise ValueError(f"dual_clip_c must be > 1 when set, got {c}")


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over ``mask`` (0 when the mask is empty). Shapes equal; returns 0-d."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def expand_adv(adv: Tensor, like: Tensor) -> Tensor:
    """Broadcast per-sequence advantages [N] (or [N, T]) to the token grid [N, T]."""
    if adv.dim() == 1:
        adv = adv.unsqueeze(-1)
    return adv.expand_as(like)


def token_ratio(logp: Tensor, old_logp: Tensor) -> Tensor:
    """Ratio pi / pi_old per token from log-probs, log-ratio clamped to +-20. Shape: [N, T]."""
    return torch.exp((logp - old_logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))


def ppo_surrogate(ratio: Tensor, adv: Tensor, eps_low: float, eps_high: float) -> tuple[Tensor, ...]:
    """Per-token clipped PPO loss ``max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high))``.

    Args:
        ratio: Importance ratio. Shape: [N, T].
        adv: Advantages on the token grid. Shape: [N, T].
        eps_low: Lower clip distance from 1.
        eps_high: Upper clip distance from 1.

    Returns:
        (loss [N, T], low_hit [N, T] bool, high_hit [N, T] bool); a hit token has zero gradient.
    """
    loss = torch.maximum(-adv * ratio, -adv * ratio.clamp(1.0 - eps_low, 1.0 + eps_high))
    low_hit = (ratio < 1.0 - eps_low) & (adv < 0)
    high_hit = (ratio > 1.0 + eps_high) & (adv > 0)
    return loss, low_hit, high_hit


def apply_dual_clip(loss: Tensor, ratio: Tensor, adv: Tensor, c: float | None) -> tuple[Tensor, Tensor]:
    """Dual clip (arXiv 1912.09729): for adv < 0 and ratio > c the loss is the constant ``-c * adv``.

    Equals verl's ``min(max(...), -c A)`` for adv < 0; the replaced tokens get ZERO gradient.

    Returns:
        (loss [N, T], dual_hit [N, T] bool).
    """
    if c is None:
        return loss, torch.zeros_like(ratio, dtype=torch.bool)
    hit = (adv < 0) & (ratio > c)
    return torch.where(hit, -adv * c, loss), hit


@torch.no_grad()
def clip_metrics(
    ratio: Tensor, mask: Tensor, low: Tensor, high: Tensor, dual: Tensor | None, approx_kl: Tensor
) -> dict[str, Tensor]:
    """Masked clip statistics over the units of ``mask`` (tokens [N, T] or sequences [N]).

    Args:
        ratio: Ratios on the same grid as ``mask``.
        mask: 1.0 for valid units.
        low: Lower bound active. Same shape, bool.
        high: Upper bound active. Same shape, bool.
        dual: Dual clip active (or None). Same shape, bool.
        approx_kl: Precomputed scalar (see :func:`approx_kl`).

    Returns:
        Dict with keys :data:`METRIC_KEYS`, detached 0-d tensors.
    """
    ratio, mask = ratio.detach(), mask.to(ratio.dtype)
    valid = mask > 0
    inf = torch.tensor(float("inf"), dtype=ratio.dtype, device=ratio.device)
    rmin = torch.where(valid, ratio, inf).amin()
    rmax = torch.where(valid, ratio, -inf).amax()
    one = torch.ones_like(rmin)
    dual = torch.zeros_like(low) if dual is None else dual
    return {
        "clipfrac_low": masked_mean(low.to(mask.dtype), mask),
        "clipfrac_high": masked_mean(high.to(mask.dtype), mask),
        "clipfrac": masked_mean((low | high).to(mask.dtype), mask),
        "clipfrac_dual": masked_mean(dual.to(mask.dtype), mask),
        "ratio_mean": masked_mean(ratio, mask),
        "ratio_min": torch.where(torch.isfinite(rmin), rmin, one),  # 1.0 when nothing is valid
        "ratio_max": torch.where(torch.isfinite(rmax), rmax, one),
        "approx_kl": approx_kl.detach(),
    }


@torch.no_grad()
def approx_kl(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    """k2 estimate ``mean(0.5 * (logp - old_logp)^2)`` over valid tokens. Returns 0-d."""
    return masked_mean(0.5 * (logp.detach() - old_logp) ** 2, mask)


def token_clip_output(
    loss: Tensor, ratio: Tensor, mask: Tensor, hits: tuple[Tensor, ...], kl: Tensor
) -> ClipOutput:
    """Mask a token-level loss and attach metrics; ``hits`` = (low, high, dual)."""
    low, high, dual = hits
    return ClipOutput(loss=loss * mask, metrics=clip_metrics(ratio, mask, low, high, dual, kl))


def probe_clip(clip: Any, where: str) -> set[str]:
    """Call ``clip`` once on a tiny batch [N=2, T=3] (ratios both sides of 1, both advantage signs) and return
    its metric keys; a clip that raises, does not return a :class:`ClipOutput` with a finite loss of that
    shape, a loss with no gradient wrt ``logp``, or a metric that is not a number is a ``ConfigError`` naming
    ``where``. Its runs would fail in their first update, or train nothing, after the model was loaded and
    the first rollouts generated (hours at paper scale, and a sweep's other arms first)."""
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.2, -0.8]], requires_grad=True)  # [N=2, T=3]
    old = logp.detach() + torch.tensor([[0.4, -0.4, 0.1], [-0.6, 0.2, 0.0]])  # token [1, 2]: ratio exactly 1
    adv, mask = torch.tensor([1.0, -1.0]), torch.ones(2, 3)
    try:
        with torch.enable_grad():  # a caller under no_grad must not make every clip look gradient-free
            out = clip(logp, old, adv, mask)
    except Exception as exc:  # noqa: BLE001 - a plugin's bug, reported with where it is
        raise ComponentError(f"{where}: {probe_failure('clip', clip, 'a probe batch of [2, 3] tokens', exc)}") from None
    if not isinstance(out, ClipOutput):
        raise _probe_error(clip, where, f"returned {type(out).__name__}; a clip variant returns "
                           "ClipOutput(loss, metrics) (klear_lab/rl/clip/base.py)")
    if not isinstance(out.loss, Tensor) or out.loss.shape != mask.shape or not torch.isfinite(out.loss).all():
        got = tuple(out.loss.shape) if isinstance(out.loss, Tensor) else type(out.loss).__name__
        raise _probe_error(clip, where, f"returned a loss of {got}; expected finite per-token losses "
                           "of the tokens' shape [2, 3]")
    _check_gradient(clip, out.loss, logp, where)
    _check_metrics(clip, out.metrics, where)
    return set(out.metrics)


def _probe_error(clip: Any, where: str, problem: str) -> Exception:
    """A ``ComponentError`` (a ``ConfigError``) prefixed with the config key, naming the clip and its file."""
    return ComponentError(f"{where}: {component_error('clip', clip, problem)}")


def _check_gradient(clip: Any, loss: Tensor, logp: Tensor, where: str) -> None:
    """Refuse a probe loss that cannot move the policy: no autograd path to ``logp`` (built from
    ``logp.detach()``, say), or a gradient exactly 0 on every token. Every clip has a gradient on the probe's
    token of ratio exactly 1 and advantage -1 (inside any clip range), so a zero one everywhere is a bug, not
    clipping; such a run trained nothing (rl/grad_norm 0.0 at every update) and exited 0."""
    grad = None
    if loss.requires_grad:
        with torch.enable_grad():  # the sum, too, under a caller's no_grad
            (grad,) = torch.autograd.grad(loss.sum(), logp, allow_unused=True)
    if grad is None:
        raise _probe_error(clip, where, "returned a loss with no gradient path to logp (loss.requires_grad is "
                           f"{loss.requires_grad}; computed from logp.detach() or under torch.no_grad()?): "
                           "every update would leave the policy unchanged")
    if not grad.any():
        raise _probe_error(clip, where, "returned a loss whose gradient wrt logp is 0 on every token of a probe "
                           "batch [2, 3], one of them of ratio 1 and advantage -1 (inside every clip range): "
                           "every update would leave the policy unchanged")


def metric_problem(key: str, value: Any) -> str | None:
    """What is wrong with a clip's metric ``key`` (None: nothing): a run logs a real number or a 0-d tensor,
    what ``float`` turns into one value."""
    if isinstance(value, Tensor):
        if value.dim() == 0:
            return None
        what = f"a tensor of shape {tuple(value.shape)}"
    elif isinstance(value, numbers.Real):
        return None
    else:
        what = repr(value)[:60]
    return f"returned metric {key!r} = {what}; a metric is a number or a 0-d tensor (.mean() or .item() it)"


def _check_metrics(clip: Any, metrics: Any, where: str) -> None:
    """Refuse metrics a run cannot log: not a dict, or a value neither a number nor a 0-d tensor. The run
    converted them with ``float`` in its first update and crashed there (ValueError, exit 1)."""
    if not isinstance(metrics, dict):
        raise _probe_error(clip, where, f"returned metrics of type {type(metrics).__name__}; ClipOutput.metrics "
                           "is a dict of metric name -> number or 0-d tensor")
    for key, value in metrics.items():
        if (problem := metric_problem(key, value)) is not None:
            raise _probe_error(clip, where, problem)
