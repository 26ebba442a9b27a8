"""CISPO, upper-only TRL / MiniMax form: absolute cap on the stop-gradient importance weight."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from klear_lab.registry import CLIP
from klear_lab.rl.clip.base import (
    ClipOutput,
    approx_kl,
    check_eps,
    expand_adv,
    token_clip_output,
    token_ratio,
)


@CLIP.register("cispo_upper")
@dataclass(frozen=True)
class CISPOUpperClip:
    """CISPO, upper-only (MiniMax-M1, arXiv 2506.13585, Sec. 3.1, no lower bound; TRL form).

    ``loss = -sg(min(r, cap)) A log pi`` per token; ``cap`` is an ABSOLUTE bound on r (TRL
    ``loss_type="cispo"``, ``epsilon_high=5.0`` recommended), not a distance from 1. Every token
    keeps its gradient ``-min(r, cap) A``. As with ``cispo`` the forward value scales with log pi.

    Metrics: ``clipfrac_high`` = share of r > cap; ``clipfrac_low`` is always 0.
    Checked against paper.md §7 (TRL ``clamp(coef_1, max=epsilon_high).detach()``).

    Attributes:
        cap: Absolute upper bound on the importance weight r (not a distance from 1), >= 1 (TRL: 5.0).
    """

    cap: float = 5.0

    seq_level: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_eps("cap", self.cap, upper=None)
        if self.cap < 1.0:  # a delta written as in `cispo` (eps_high: 0.28) would scale every token down
            raise ValueError(f"cap is an absolute bound on r, not a distance from 1: {self.cap} < 1 would cap even "
                             "on-policy tokens (r = 1); TRL recommends 5.0")

    def __call__(self, logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor) -> ClipOutput:
        """Per-token loss [N, T] for logp/old_logp/mask [N, T] and adv [N]."""
        ratio = token_ratio(logp, old_logp)  # [N, T]
        a = expand_adv(adv, ratio)  # [N, T]
        weight = ratio.detach().clamp(max=self.cap)  # sg(min(r, cap))
        high = ratio > self.cap
        hits = (torch.zeros_like(high), high, None)
        return token_clip_output(-weight * a * logp, ratio, mask, hits, approx_kl(logp, old_logp, mask))
