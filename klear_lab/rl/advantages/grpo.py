"""GRPO group-normalised advantage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor

from klear_lab.registry import ADVANTAGE
from klear_lab.rl.advantages.base import centered, check_rewards


@ADVANTAGE.register("grpo")
@dataclass(frozen=True)
class GRPOAdvantage:
    """``A_i = (R_i - mean(R)) / (std(R) + eps)`` within each group.

    GRPO outcome supervision (DeepSeekMath, arXiv 2402.03300, Sec. 4.1.2). ``std`` is the
    unbiased (G - 1) estimate and ``eps = 1e-6``, as verl ``compute_grpo_outcome_advantage``;
    a group with equal rewards gets all-zero advantages (exactly: ``centered``).
    ``min_group_size = 2``: the unbiased std of one sample is undefined.

    Attributes:
        eps: Added to the group's std before dividing, > 0 (verl: 1e-6).
    """

    eps: float = 1e-6

    min_group_size: ClassVar[int] = 2

    def __post_init__(self) -> None:
        if not self.eps > 0:
            raise ValueError(f"eps must be > 0, got {self.eps}")

    def __call__(self, rewards: Tensor) -> Tensor:
        """Rewards [B, G] -> advantages [B, G]."""
        check_rewards(rewards, self.min_group_size, "grpo")
        std = rewards.std(dim=1, unbiased=True, keepdim=True)  # [B, 1]
        return centered(rewards) / (std + self.eps)
