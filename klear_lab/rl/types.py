"""Shared RL types: aggregation context, micro-batch tensors and the component protocols.

Shapes: ``N`` sequences (``N = B * G``), ``T`` response tokens, ``B`` prompts, ``G`` group size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from torch import Tensor

if TYPE_CHECKING:
    from klear_lab.rl.clip.base import ClipOutput


@dataclass(frozen=True)
class AggContext:
    """Counts of the WHOLE optimizer batch, used as aggregation denominators.

    Because every micro-batch divides by the same global counts, the sum of micro-batch
    aggregates equals the full-batch aggregate, and gradient accumulation gives the same
    gradient as one big batch. Under data parallelism the caller all-reduces the counts
    (sum ``num_tokens``/``num_seqs`` over ranks) and divides the loss by nothing else.

    Attributes:
        num_tokens: Number of valid (mask = 1) tokens in the optimizer batch.
        num_seqs: Number of sequences with at least one valid token in the optimizer batch.
        max_len: Length normaliser for ``seq-mean-token-sum-norm`` (Dr. GRPO); ideally the
            generation budget ``max_new_tokens`` so it stays constant across steps.
        num_rows: Rows of the optimizer batch, fully masked ones included (a response
            ``rl.overlong: mask`` drops): Dr. GRPO's constant divisor. None = ``num_seqs``.
    """

    num_tokens: float
    num_seqs: float
    max_len: int
    num_rows: float | None = None

    def __post_init__(self) -> None:
        if self.num_tokens < 0:
            raise ValueError(f"num_tokens must be >= 0, got {self.num_tokens}")
        if self.num_seqs < 0:
            raise ValueError(f"num_seqs must be >= 0, got {self.num_seqs}")
        if self.max_len < 1:
            raise ValueError(f"max_len must be >= 1, got {self.max_len}")

    @classmethod
    def from_mask(cls, mask: Tensor, max_len: int | None = None, count_rows: bool = False) -> AggContext:
        """Context for a full optimizer batch given its response mask.

        Args:
            mask: Response mask of the whole optimizer batch. Shape: [N, T].
            max_len: Dr. GRPO length normaliser; defaults to the padded width ``T``.
            count_rows: Set ``num_rows`` to N (every row of ``mask`` is a response of the batch);
                not for a mask that selects rows, such as the positives'.

        Returns:
            The context; ``num_seqs`` counts only rows with at least one valid token.
        """
        return cls(
            num_tokens=float(mask.sum().item()),
            num_seqs=float((mask.sum(dim=-1) > 0).sum().item()),
            max_len=int(max_len if max_len is not None else mask.shape[-1]),
            num_rows=float(mask.shape[0]) if count_rows else None,
        )


@dataclass(frozen=True)
class PolicyBatch:
    """Tensors of one micro-batch for :func:`klear_lab.rl.objective.rl_objective`.

    Attributes:
        logp: Current-policy log-probs of the sampled tokens (requires grad). Shape: [N, T].
        old_logp: Behaviour-policy log-probs (detached). Shape: [N, T].
        adv: Per-sequence advantages. Shape: [N].
        mask: 1.0 for response tokens, 0.0 for padding. Shape: [N, T].
        positive: Fully-correct responses for the SFT-on-positives term. Shape: [N] bool.
        ref_logp: Reference-policy log-probs for the KL term. Shape: [N, T].
        entropy: Per-token policy entropy for the entropy bonus. Shape: [N, T].
    """

    logp: Tensor
    old_logp: Tensor
    adv: Tensor
    mask: Tensor
    positive: Tensor | None = None
    ref_logp: Tensor | None = None
    entropy: Tensor | None = None


class ClipObjective(Protocol):
    """logp/old_logp/mask [N, T], adv [N] -> per-token loss [N, T] (masked) + metrics."""

    seq_level: bool

    def __call__(self, logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor) -> ClipOutput:
        """Per-token loss and metrics."""


class Aggregator(Protocol):
    """Per-token loss [N, T] + mask [N, T] + global counts -> scalar."""

    def __call__(self, loss: Tensor, mask: Tensor, ctx: AggContext) -> Tensor:
        """Scalar contribution of one micro-batch."""


class AdvantageEstimator(Protocol):
    """Rewards [B, G] -> advantages [B, G]."""

    min_group_size: int

    def __call__(self, rewards: Tensor) -> Tensor:
        """Advantages, same shape as rewards."""


class GroupFilter(Protocol):
    """Shaped scores [B, G] float + binary correctness [B, G] bool -> keep [B] bool."""

    def __call__(self, scores: Tensor, acc: Tensor) -> Tensor:
        """Keep mask over groups."""
