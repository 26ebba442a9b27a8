"""Shared input check of the advantage estimators, and the output check of any (a plugin's too)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from klear_lab.errors import ComponentError, component_error, probe_failure


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


def checked_advantages(estimator: Any, rewards: Tensor) -> Tensor:
    """``estimator(rewards)``, checked to be a tensor of the rewards' shape [B, G]: a plugin's that returned
    one value per group [B] failed later with an ``IndexError`` deep in the update, after the rollouts."""
    adv = estimator(rewards)
    if not isinstance(adv, Tensor) or adv.shape != rewards.shape:
        got = f"shape {tuple(adv.shape)}" if isinstance(adv, Tensor) else type(adv).__name__
        raise component_error("advantage", estimator, f"returned {got} for rewards of shape "
                              f"{tuple(rewards.shape)}; an advantage estimator returns one advantage per "
                              "completion, a tensor of the rewards' shape [B, G]")
    return adv


def probe_advantage(estimator: Any, where: str) -> None:
    """Call ``estimator`` once on tiny rewards [2, G] (G = 4, or its ``min_group_size``): a plugin that raises
    or returns the wrong shape is a ``ConfigError`` naming ``where`` before any model loads, not after the
    first rollouts."""
    g = max(4, int(getattr(estimator, "min_group_size", 1)))
    rewards = torch.tensor([[1.0, 0.0] * g, [1.0, 1.0] * g])[:, :g]  # one mixed group, one flat
    try:
        checked_advantages(estimator, rewards)
    except ComponentError as exc:
        raise ComponentError(f"{where}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a plugin's bug, reported with where it is
        failure = probe_failure("advantage", estimator, f"probe rewards of {list(rewards.shape)}", exc)
        raise ComponentError(f"{where}: {failure}") from None
