"""DAPO dynamic sampling: drop groups whose metric is identical across the group."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from torch import Tensor

from klear_lab.registry import GROUP_FILTER

METRICS = ("acc", "score")


@GROUP_FILTER.register("zero_variance")
@dataclass(frozen=True)
class ZeroVarianceFilter:
    """Keep a group only if its metric varies: the paper's zero-advantage filtering (Klear-Reasoner Figure 5).

    A group whose rollouts all score alike has all-zero advantages and trains nothing, so it is dropped
    (DAPO, arXiv 2503.14476, Sec. 3.2 Dynamic Sampling; no group is generated in its place here, but
    ``rl.max_kept_prompts`` can train on the first groups kept of a larger batch, as the paper's scripts do).
    ``metric="acc"`` (default; Klear-Reasoner's ``filter_groups.metric=acc``) uses binary full
    correctness: groups where all or none of the responses are fully correct are dropped, even when
    partial (soft) scores differ. ``metric="score"`` uses the shaped score and keeps any group whose
    scores are not all equal (drops only groups whose advantages are all 0, the paper's wording to the
    letter). Groups of size 1 are kept, as in verl's
    ``filter_groups`` (their std is 0 by definition, yet verl keeps them). Log the kept fraction.

    Attributes:
        metric: What must vary within a group: ``acc`` (full correctness, right or wrong) or ``score``
            (the reward's shaped score).
    """

    metric: Literal["acc", "score"] = "acc"

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, got {self.metric!r}")

    def __call__(self, scores: Tensor, acc: Tensor) -> Tensor:
        """Scores [B, G] float, acc [B, G] bool -> keep [B] bool."""
        values = acc.float() if self.metric == "acc" else scores  # [B, G]
        varies = values.amax(dim=1) > values.amin(dim=1)  # [B]
        return varies | (values.shape[1] == 1)
