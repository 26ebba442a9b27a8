"""Shared helper of the aggregation modes: division by a global count that may be zero."""

from __future__ import annotations

from torch import Tensor


def divide(total: Tensor, denom: float) -> Tensor:
    """``total / denom``; an empty optimizer batch (``denom <= 0``) gives 0 with the graph kept."""
    return total / denom if denom > 0 else total * 0.0
