"""DAPO clip-higher: asymmetric PPO clip, optional dual clip."""

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


@CLIP.register("clip_higher")
@dataclass(frozen=True)
class ClipHigherClip:
    """DAPO clip-higher (Yu et al. 2025, arXiv 2503.14476, Sec. 3.1 Clip-Higher).

    ``loss = -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)`` per token with decoupled bounds
    (eps_low 0.2, eps_high 0.28); clipped tokens get zero gradient. ``dual_clip_c`` as in
    :class:`~klear_lab.rl.clip.ppo.PPOClip` (arXiv 1912.09729; Klear-Reasoner scripts use 10.0).

    Checked against verl ``compute_policy_loss_vanilla`` with ``clip_ratio_low=0.2``,
    ``clip_ratio_high=0.28``.

    Attributes:
        eps_low: Lower clip distance from 1 (r >= 1 - eps_low); in (0, 1).
        eps_high: Upper clip distance from 1 (r <= 1 + eps_high), > 0; DAPO raises it to 0.28.
        dual_clip_c: Dual-clip constant c > 1 for A < 0; None = off.
    """

    eps_low: float = 0.2
    eps_high: float = 0.28
    dual_clip_c: float | None = None

    seq_level: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_eps("eps_low", self.eps_low)
        check_eps("eps_high", self.eps_high, upper=None)
        check_dual_clip(self.dual_clip_c)

    def __call__(self, logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor) -> ClipOutput:
        """Per-token loss [N, T] for logp/old_logp/mask [N, T] and adv [N]."""
        ratio = token_ratio(logp, old_logp)  # [N, T]
        a = expand_adv(adv, ratio)  # [N, T]
        loss, low, high = ppo_surrogate(ratio, a, self.eps_low, self.eps_high)
        loss, dual = apply_dual_clip(loss, ratio, a, self.dual_clip_c)
        return token_clip_output(loss, ratio, mask, (low, high, dual), approx_kl(logp, old_logp, mask))
