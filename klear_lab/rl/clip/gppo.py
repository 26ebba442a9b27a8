"""GPPO: gradient-preserving clipping (Klear-Reasoner)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from klear_lab.registry import CLIP
from klear_lab.rl.clip.base import (
    ClipOutput,
    apply_dual_clip,
    approx_kl,
    check_dual_clip,
    check_eps,
    expand_adv,
    token_clip_output,
    token_ratio,
)


@CLIP.register("gppo")
@dataclass(frozen=True)
class GPPOClip:
    """GPPO (Klear-Reasoner, arXiv 2508.07629, Eq. 11; general beta form Appendix A.2 Eq. 17).

    Per-token objective (loss = its negation), ``r = pi / pi_old``, ``u = exp(log pi - sg(log pi))`` (value 1,
    gradient = grad log pi):

    - ``beta1 (1 - eps_low) u A``   if r < 1 - eps_low and A < 0   (gradient F = beta1 (1 - eps_low))
    - ``beta2 (1 + eps_high) u A``  if r > 1 + eps_high and A > 0  (gradient F = beta2 (1 + eps_high))
    - ``r A``                        otherwise                       (gradient F = r)

    With beta1 = beta2 = 1 (the paper's setting) the forward value and clip fraction equal DAPO
    clip-higher; only the gradient of clipped tokens differs (bounded, non-zero). With beta != 1
    the forward value changes too. ``only_high``: the low side is a standard hard clip (constant
    ``(1 - eps_low) A``, zero gradient); ``beta1`` must then stay 1. ``dual_clip_c``: code-only dual
    clip (arXiv 1912.09729; official scripts use 10.0, the paper does not mention it): A < 0 and
    r > c gives the constant loss ``-c A`` with zero gradient.

    Checked against the mask-based reference sketch in paper.md §1.5 (itself matched to
    the official ``compute_gppo_loss`` / ``compute_gppo_loss_general_beta``) and the case table of
    paper Eq. 12 (r 0.5, A -1 -> F 0.8; r 1.5, A +1 -> F 1.28).

    Attributes:
        eps_low: Lower bound's distance from 1 (r < 1 - eps_low with A < 0 is clipped); in (0, 1).
        eps_high: Upper bound's distance from 1 (r > 1 + eps_high with A > 0 is clipped), > 0.
        beta1: Gradient scale of low-clipped tokens (paper Eq. 17), > 0; 1 = the paper's setting.
        beta2: Gradient scale of high-clipped tokens (paper Eq. 17), > 0; 1 = the paper's setting.
        only_high: Preserve gradients on the high side only; the low side is a hard clip (beta1 stays 1).
        dual_clip_c: Code-only dual clip constant c > 1 for A < 0 (official scripts: 10.0); None = off.
    """

    eps_low: float = 0.2
    eps_high: float = 0.28
    beta1: float = 1.0
    beta2: float = 1.0
    only_high: bool = False
    dual_clip_c: float | None = None

    seq_level: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_eps("eps_low", self.eps_low)
        check_eps("eps_high", self.eps_high, upper=None)
        check_eps("beta1", self.beta1, upper=None)
        check_eps("beta2", self.beta2, upper=None)
        check_dual_clip(self.dual_clip_c)
        if self.only_high and self.beta1 != 1.0:
            raise ValueError(f"beta1 has no effect with only_high=True; leave it at 1.0, got {self.beta1}")

    def __call__(self, logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor) -> ClipOutput:
        """Per-token loss [N, T] for logp/old_logp/mask [N, T] and adv [N]."""
        ratio = token_ratio(logp, old_logp)  # [N, T]
        a = expand_adv(adv, ratio)  # [N, T]
        low = (ratio < 1.0 - self.eps_low) & (a < 0)
        high = (ratio > 1.0 + self.eps_high) & (a > 0)
        # Eq. 11: value 1, gradient grad log pi. From log-probs, not from ``ratio``: its log-ratio clamp at
        # +-20 would zero the gradient of a token clipped that far out, which GPPO must keep
        unit = torch.exp(logp - logp.detach())
        low_surr = torch.ones_like(unit) if self.only_high else self.beta1 * unit
        surr = torch.where(
            low,
            (1.0 - self.eps_low) * low_surr,
            torch.where(high, self.beta2 * (1.0 + self.eps_high) * unit, ratio),
        )
        loss, dual = apply_dual_clip(-a * surr, ratio, a, self.dual_clip_c)
        return token_clip_output(loss, ratio, mask, (low, high, dual), approx_kl(logp, old_logp, mask))
