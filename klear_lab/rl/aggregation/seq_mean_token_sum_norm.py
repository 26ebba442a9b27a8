"""Dr. GRPO: token sum divided by a constant (number of sequences x a fixed length)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from klear_lab.registry import AGGREGATION
from klear_lab.rl.aggregation.base import divide
from klear_lab.rl.types import AggContext


@AGGREGATION.register("seq-mean-token-sum-norm")
@dataclass(frozen=True)
class SeqMeanTokenSumNorm:
    """``sum_{i,t} m_{i,t} l_{i,t} / (num_rows * L)``: Dr. GRPO (arXiv 2503.20783).

    ``L = norm_len`` or, when None, ``ctx.max_len`` (set it to the generation budget so the
    divisor is constant across steps, as Dr. GRPO prescribes). This is TRL's ``dr_grpo``
    (divides by B * ``max_completion_length``). verl's mode of the same name divides only by
    ``loss_scale_factor`` (default: the padded width of the micro-batch), without 1 / num_seqs;
    that is num_seqs times larger and depends on padding, a constant factor that only rescales
    the learning rate when the batch size is fixed. ``num_rows`` counts responses whose tokens are
    all masked (``rl.overlong: mask``) too, as TRL's B does, so the divisor does not shrink with them.

    Attributes:
        norm_len: The length L of the divisor, >= 1; None = ``ctx.max_len``, which RL runs set to the
            generation budget ``rl.max_new_tokens``.
    """

    norm_len: int | None = None

    def __post_init__(self) -> None:
        if self.norm_len is not None and self.norm_len < 1:
            raise ValueError(f"norm_len must be >= 1 or None, got {self.norm_len}")

    def __call__(self, loss: Tensor, mask: Tensor, ctx: AggContext) -> Tensor:
        """Scalar contribution of this micro-batch; loss/mask [N, T]."""
        length = self.norm_len if self.norm_len is not None else ctx.max_len
        rows = ctx.num_rows if ctx.num_rows is not None else ctx.num_seqs
        return divide((loss * mask).sum(), rows * length)
