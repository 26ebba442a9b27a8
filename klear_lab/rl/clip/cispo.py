"""CISPO, two-sided verl form: clipped, stop-gradient importance weight on log pi."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

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


@CLIP.register("cispo")
@dataclass(frozen=True)
class CISPOClip:
    """CISPO, two-sided (MiniMax-M1, arXiv 2506.13585, Sec. 3.1; verl ``cispo`` form).

    ``loss = -sg(clip(r, 1 - eps_low, 1 + eps_high)) A log pi`` per token. The weight is clipped
    whatever the sign of A and never removes a token's gradient: d loss / d log pi =
    ``-clip(r) A``. The forward VALUE is not a PPO-style surrogate (it scales with log pi), so
    compare variants by gradients and metrics, not by loss value. ``eps_low = 1.0`` removes the
    lower bound (MiniMax-M1 says it only tuned the upper one; see also ``cispo_upper``).
    Defaults 0.2 / 0.28 are Klear-Reasoner's GPPO bounds, as its CISPO comparison (paper
    Appendix A.1) analyses CISPO with bounds 1 - eps_l, 1 + eps_h; the values it ran are unconfirmed.

    Metrics: ``clipfrac_low`` = share of r < 1 - eps_low, ``clipfrac_high`` = share of
    r > 1 + eps_high (weight clipped, gradient kept).
    Checked against paper.md §7 (verl ``cispo``: bounds are deltas from 1).

    Attributes:
        eps_low: The weight's lower bound is 1 - eps_low; in (0, 1], 1.0 = no lower bound.
        eps_high: The weight's upper bound is 1 + eps_high, > 0.
    """

    eps_low: float = 0.2
    eps_high: float = 0.28

    seq_level: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if not 0.0 < self.eps_low <= 1.0:
            raise ValueError(f"eps_low must be in (0, 1], got {self.eps_low}")
        check_eps("eps_high", self.eps_high, upper=None)

    def __call__(self, logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor) -> ClipOutput:
        """Per-token loss [N, T] for logp/old_logp/mask [N, T] and adv [N]."""
        ratio = token_ratio(logp, old_logp)  # [N, T]
        a = expand_adv(adv, ratio)  # [N, T]
        weight = ratio.detach().clamp(1.0 - self.eps_low, 1.0 + self.eps_high)  # sg(clip(r))
        low, high = ratio < 1.0 - self.eps_low, ratio > 1.0 + self.eps_high
        hits = (low, high, None)
        return token_clip_output(-weight * a * logp, ratio, mask, hits, approx_kl(logp, old_logp, mask))
