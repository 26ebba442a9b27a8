"""Dr. GRPO advantage: group mean baseline without std normalisation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor

from klear_lab.registry import ADVANTAGE
from klear_lab.rl.advantages.base import centered, check_rewards


@ADVANTAGE.register("dr_grpo")
@dataclass(frozen=True)
class DrGRPOAdvantage:
    """``A_i = R_i - mean(R)`` within each group (Dr. GRPO, arXiv 2503.20783).

    verl: ``adv_estimator=grpo`` with ``norm_adv_by_std_in_grpo=False``. ``min_group_size = 2``:
    with G = 1 every advantage is exactly 0, so a run would silently learn nothing.
    """

    min_group_size: ClassVar[int] = 2

    def __call__(self, rewards: Tensor) -> Tensor:
        """Rewards [B, G] -> advantages [B, G]."""
        check_rewards(rewards, self.min_group_size, "dr_grpo")
        return centered(rewards)
