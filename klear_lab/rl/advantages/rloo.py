"""RLOO advantage: leave-one-out group mean baseline."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor

from klear_lab.registry import ADVANTAGE
from klear_lab.rl.advantages.base import centered, check_rewards


@ADVANTAGE.register("rloo")
@dataclass(frozen=True)
class RLOOAdvantage:
    """``A_i = R_i - (1 / (G - 1)) sum_{j != i} R_j`` (RLOO, Ahmadian et al. 2024, arXiv 2402.14740).

    Equivalently ``G / (G - 1) (R_i - mean(R))``. Checked against verl
    ``compute_rloo_outcome_advantage``. ``min_group_size = 2``: leave-one-out needs another sample.
    """

    min_group_size: ClassVar[int] = 2

    def __call__(self, rewards: Tensor) -> Tensor:
        """Rewards [B, G] -> advantages [B, G]."""
        check_rewards(rewards, self.min_group_size, "rloo")
        G = rewards.shape[1]
        return centered(rewards) * (G / (G - 1))  # = R_i - loo_mean_i, exactly 0 in a group of equal rewards
