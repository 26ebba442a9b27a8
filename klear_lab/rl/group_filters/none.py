"""No online group filter: keep every group."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from klear_lab.registry import GROUP_FILTER


@GROUP_FILTER.register("none")
@dataclass(frozen=True)
class NoGroupFilter:
    """Keep all groups (plain GRPO without DAPO dynamic sampling)."""

    def __call__(self, scores: Tensor, acc: Tensor) -> Tensor:
        """Scores [B, G] float, acc [B, G] bool -> keep [B] bool (all True)."""
        return torch.ones(scores.shape[0], dtype=torch.bool, device=scores.device)
