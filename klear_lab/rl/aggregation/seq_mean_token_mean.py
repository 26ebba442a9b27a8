"""Per-sequence token mean, then mean over the optimizer batch's sequences."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from klear_lab.registry import AGGREGATION
from klear_lab.rl.aggregation.base import divide
from klear_lab.rl.types import AggContext


@AGGREGATION.register("seq-mean-token-mean")
@dataclass(frozen=True)
class SeqMeanTokenMean:
    """``(1 / num_seqs) sum_i (1 / |o_i|) sum_t m_{i,t} l_{i,t}``: sample-level GRPO.

    Original GRPO (DeepSeekMath, arXiv 2402.03300, Eq. 3) and GSPO. ``|o_i|`` is the row's own
    valid-token count (local to the micro-batch, so exact under accumulation); ``num_seqs`` is the
    optimizer batch's count of non-empty rows. Checked against verl ``agg_loss``
    ``seq-mean-token-mean`` (global ``batch_num_seqs`` form) and TRL ``grpo``.
    """

    def __call__(self, loss: Tensor, mask: Tensor, ctx: AggContext) -> Tensor:
        """Scalar contribution of this micro-batch; loss/mask [N, T]."""
        per_seq = (loss * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)  # [N]
        return divide(per_seq.sum(), ctx.num_seqs)
