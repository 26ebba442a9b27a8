"""Shared input check of the advantage estimators."""

from __future__ import annotations

from torch import Tensor


def check_rewards(rewards: Tensor, min_group_size: int, name: str) -> None:
    """Raise ``ValueError`` unless ``rewards`` is [B, G] with ``G >= min_group_size``."""
    if rewards.dim() != 2:
        raise ValueError(f"{name}: rewards must have shape [B, G], got {tuple(rewards.shape)}")
    if rewards.shape[1] < min_group_size:
        raise ValueError(f"{name}: group size G must be >= {min_group_size}, got {rewards.shape[1]}")
