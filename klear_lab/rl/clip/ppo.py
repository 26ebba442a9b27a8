"""Symmetric PPO clip, optional dual clip."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor

from klear_lab.registry import CLIP
from klear_lab.rl.clip.base import (
    ClipOutput,
    apply_dual_clip,
    approx_kl,
    check_dual_clip,
    check_eps,
    expand_adv,
    ppo_surrogate,
    token_clip_output,
    token_ratio,
)


@CLIP.register("ppo")
@dataclass(frozen=True)
class PPOClip:
    """PPO clipped surrogate (Schulman et al. 2017, arXiv 1707.06347, Eq. 7).

    ``loss = -min(r A, clip(r, 1 - eps, 1 + eps) A)`` per token, ``r = pi / pi_old``; clipped
    tokens (r > 1 + eps with A > 0, r < 1 - eps with A < 0) get zero gradient. With
    ``dual_clip_c`` (Ye et al. 2020, arXiv 1912.09729) tokens with A < 0 and r > c get the constant
    loss ``-c A`` and zero gradient; verl's default c is 3.0, Klear-Reasoner's scripts use 10.0.

    Checked against verl ``compute_policy_loss_vanilla`` (``clip_ratio=0.2``, ``clip_ratio_c``).

    Attributes:
        eps: Clip distance from 1 on both sides: r is clipped to [1 - eps, 1 + eps]; in (0, 1).
        dual_clip_c: Dual-clip constant c > 1 for A < 0 (verl's default 3.0, Klear-Reasoner's 10.0);
            None = off.
    """

    eps: float = 0.2
    dual_clip_c: float | None = None

    seq_level: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_eps("eps", self.eps)
        check_dual_clip(self.dual_clip_c)

    def __call__(self, logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor) -> ClipOutput:
        """Per-token loss [N, T] for logp/old_logp/mask [N, T] and adv [N]."""
        ratio = token_ratio(logp, old_logp)  # [N, T]
        a = expand_adv(adv, ratio)  # [N, T]
        loss, low, high = ppo_surrogate(ratio, a, self.eps, self.eps)
        loss, dual = apply_dual_clip(loss, ratio, a, self.dual_clip_c)
        return token_clip_output(loss, ratio, mask, (low, high, dual), approx_kl(logp, old_logp, mask))
