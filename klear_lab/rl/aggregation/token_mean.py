"""Token-level mean over the whole optimizer batch."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from klear_lab.registry import AGGREGATION
from klear_lab.rl.aggregation.base import divide
from klear_lab.rl.types import AggContext


@AGGREGATION.register("token-mean")
@dataclass(frozen=True)
class TokenMean:
    """``sum_{i,t} m_{i,t} l_{i,t} / sum_{i,t} m_{i,t}`` over the OPTIMIZER batch.

    DAPO token-level loss (arXiv 2503.14476, Sec. 3.3, normaliser 1 / sum_i |o_i|); used by
    GPPO / Klear-Reasoner (arXiv 2508.07629, Sec. 2.4, Eq. 11). The denominator is
    ``ctx.num_tokens`` (global), as upstream verl's ``token-mean`` and TRL's ``dapo``; the
    Klear-Reasoner fork normalises per micro-batch instead (paper.md §2, caveat 5).
    """

    def __call__(self, loss: Tensor, mask: Tensor, ctx: AggContext) -> Tensor:
        """Scalar contribution of this micro-batch; loss/mask [N, T]."""
        return divide((loss * mask).sum(), ctx.num_tokens)
