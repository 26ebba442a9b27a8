"""GSPO: sequence-level (geometric-mean) importance ratio with PPO-style clipping."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from klear_lab.registry import CLIP
from klear_lab.rl.clip.base import ClipOutput, approx_kl, check_eps, clip_metrics, expand_adv

# verl compute_policy_loss_gspo clamps the token-form log-ratio at 10 before exp
SEQ_LOG_RATIO_MAX = 10.0


@CLIP.register("gspo")
@dataclass(frozen=True)
class GSPOClip:
    """GSPO (Zheng et al. 2025, arXiv 2507.18071, Sec. 4.1; GSPO-token form Sec. 4.3).

    ``s_i = exp(mean_t (log pi - log pi_old))`` over the valid tokens of sequence i, and
    ``loss = -min(s A, clip(s, 1 - eps_low, 1 + eps_high) A)`` applied on the token form
    ``s_{i,t} = sg(s_i) pi_t / sg(pi_t)`` (value s_i, gradient s_i grad log pi_t), log-ratio
    clamped at 10. Per-token ratios are never clipped: a whole sequence is clipped or not. Use
    with ``seq-mean-token-mean`` aggregation (verl forces it) so each sequence's gradient is
    ``s_i A_i mean_t grad log pi_t`` as in the paper. Defaults eps 3e-4 / 4e-4 are the paper's.

    Metrics refer to SEQUENCES with at least one valid token: ``clipfrac_*`` = share of
    clipped sequences, ``ratio_*`` = statistics of s_i; ``approx_kl`` stays per token.
    Checked against verl ``compute_policy_loss_gspo``.

    Attributes:
        eps_low: Lower clip distance from 1 of the SEQUENCE ratio s_i; in (0, 1) (paper: 3e-4).
        eps_high: Upper clip distance from 1 of the sequence ratio, > 0 (paper: 4e-4).
    """

    eps_low: float = 3e-4
    eps_high: float = 4e-4

    seq_level: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_eps("eps_low", self.eps_low)
        check_eps("eps_high", self.eps_high, upper=None)

    def __call__(self, logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor) -> ClipOutput:
        """Per-token loss [N, T] for logp/old_logp/mask [N, T] and adv [N]."""
        lengths = mask.sum(dim=-1)  # [N]
        seq_log = ((logp - old_logp) * mask).sum(dim=-1) / lengths.clamp(min=1.0)  # [N]
        log_s = (logp - logp.detach() + seq_log.detach().unsqueeze(-1)).clamp(max=SEQ_LOG_RATIO_MAX)
        s_tok = torch.exp(log_s)  # [N, T], value s_i
        a = expand_adv(adv, s_tok)  # [N, T]
        clipped = s_tok.clamp(1.0 - self.eps_low, 1.0 + self.eps_high)
        loss = torch.maximum(-a * s_tok, -a * clipped) * mask
        s_seq = torch.exp(seq_log.detach().clamp(max=SEQ_LOG_RATIO_MAX))  # [N]
        a_seq = adv if adv.dim() == 1 else adv[:, 0]  # [N]
        low = (s_seq < 1.0 - self.eps_low) & (a_seq < 0)
        high = (s_seq > 1.0 + self.eps_high) & (a_seq > 0)
        seq_mask = (lengths > 0).to(s_seq.dtype)
        metrics = clip_metrics(s_seq, seq_mask, low, high, None, approx_kl(logp, old_logp, mask))
        return ClipOutput(loss=loss, metrics=metrics)
