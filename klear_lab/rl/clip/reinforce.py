"""Unclipped importance-weighted policy gradient: the no-clipping reference."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from klear_lab.registry import CLIP
from klear_lab.rl.clip.base import ClipOutput, approx_kl, expand_adv, token_clip_output, token_ratio


@CLIP.register("reinforce")
@dataclass(frozen=True)
class ReinforceClip:
    """Unclipped surrogate ``loss = -r A`` per token, ``r = pi / pi_old`` (no hyperparameters).

    Chosen over ``-A log pi`` (verl ``gpg``) because it is exactly the PPO surrogate with the
    clip removed: on the first on-policy minibatch (r = 1) its gradient ``-r A grad log pi`` equals
    REINFORCE's ``-A grad log pi`` (Williams 1992; group baseline as in RLOO, arXiv 2402.14740), and
    on later minibatches it keeps the importance weight, so clip ablations differ from it only by
    the clipping. Metrics: all ``clipfrac_*`` are 0.
    Checked by hand: value/gradient equal ``ppo`` with an infinite eps.
    """

    seq_level: ClassVar[bool] = False

    def __call__(self, logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor) -> ClipOutput:
        """Per-token loss [N, T] for logp/old_logp/mask [N, T] and adv [N]."""
        ratio = token_ratio(logp, old_logp)  # [N, T]
        a = expand_adv(adv, ratio)  # [N, T]
        none = torch.zeros_like(ratio, dtype=torch.bool)
        return token_clip_output(-a * ratio, ratio, mask, (none, none, None), approx_kl(logp, old_logp, mask))
