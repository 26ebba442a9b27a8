"""Shared input check of the advantage estimators."""

from __future__ import annotations

from torch import Tensor


def check_rewards(rewards: Tensor, min_group_size: int, name: str) -> None:
    """Raise ``ValueError`` unless ``rewards`` is [B, G] with ``G >= min_group_size``."""
    if rewards.dim() != 2:
        raise ValueError(f"{name}: rewards must have shape [B, G], got {tuple(rewards.shape)}")
    if rewards.shape[1] < min_group_size:
        raise ValueError(f"{name}: group size G must be >= {min_group_size}, got {rewards.shape[1]}")


def centered(rewards: Tensor) -> Tensor:
    """Rewards [B, G] minus their group's mean [B, G], exactly 0 in a group whose rewards are all equal.

    The float32 mean of eight rewards of 0.7 is a few 1e-8 off 0.7, and the group's std is of the same
    size, so GRPO's ``(R - mean) / (std + 1e-6)`` gave every response of such a group one advantage of up
    to ~0.24 in size, of one sign: a group without signal pushed the policy (verl computes it the same way).
    """
    flat = rewards.amax(dim=1, keepdim=True) == rewards.amin(dim=1, keepdim=True)  # [B, 1]
    return (rewards - rewards.mean(dim=1, keepdim=True)).masked_fill(flat, 0.0)
