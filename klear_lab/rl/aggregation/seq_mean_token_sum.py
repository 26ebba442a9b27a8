"""Per-sequence token sum, then mean over the optimizer batch's sequences."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from klear_lab.registry import AGGREGATION
from klear_lab.rl.aggregation.base import divide
from klear_lab.rl.types import AggContext


@AGGREGATION.register("seq-mean-token-sum")
@dataclass(frozen=True)
class SeqMeanTokenSum:
    """``(1 / num_seqs) sum_i sum_t m_{i,t} l_{i,t}``: longer responses weigh more.

    verl ``agg_loss`` mode ``seq-mean-token-sum`` (no paper of its own; listed in
    paper.md §7); ``num_seqs`` is the optimizer batch's count of non-empty rows.
    """

    def __call__(self, loss: Tensor, mask: Tensor, ctx: AggContext) -> Tensor:
        """Scalar contribution of this micro-batch; loss/mask [N, T]."""
        return divide((loss * mask).sum(), ctx.num_seqs)
