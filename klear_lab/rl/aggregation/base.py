"""Shared helper of the aggregation modes (division by a global count that may be zero), and the probe of any
mode (a plugin's too).

A mode is called as ``aggregation(loss, mask, ctx)`` with per-token values and mask [N, T] and the optimizer
batch's counts (:class:`~klear_lab.rl.types.AggContext`), and returns this micro-batch's scalar contribution to
the loss, with its gradient: the run calls ``backward`` on the sum of such terms.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from klear_lab.errors import ComponentError, component_error, probe_failure
from klear_lab.rl.types import AggContext


def divide(total: Tensor, denom: float) -> Tensor:
    """``total / denom``; an empty optimizer batch (``denom <= 0``) gives 0 with the graph kept."""
    return total / denom if denom > 0 else total * 0.0


def probe_aggregation(aggregation: Any, where: str) -> None:
    """Call ``aggregation`` on a tiny loss [N=2, T=3] (one padded token), then on an all-padding mask with zero
    counts (a micro-batch without positives, for the SFT-on-positives term): one that raises, returns anything
    but a finite 0-d tensor, or a first result with no gradient wrt the loss is a ``ConfigError`` naming
    ``where``. Such a run failed in its first update ("grad can be implicitly created only for scalar outputs",
    exit 1), after the model loaded and the first rollouts were generated; one without gradient trained nothing."""
    loss = torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, 7.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    result = _probe_call(aggregation, where, loss, mask, AggContext.from_mask(mask, count_rows=True),
                         "a probe loss and mask of [2, 3]")
    _check_gradient(aggregation, result, loss, where)
    empty = torch.zeros_like(mask)
    _probe_call(aggregation, where, loss, empty, AggContext(num_tokens=0.0, num_seqs=0.0, max_len=3),
                "an all-padding probe mask of [2, 3] with counts 0 (a micro-batch without positives)")


def _probe_call(aggregation: Any, where: str, loss: Tensor, mask: Tensor, ctx: AggContext, probe: str) -> Tensor:
    """``aggregation(loss, mask, ctx)`` under autograd, checked to be a finite 0-d tensor."""
    try:
        with torch.enable_grad():  # a caller under no_grad must not make every mode look gradient-free
            result = aggregation(loss, mask, ctx)
    except Exception as exc:  # noqa: BLE001 - a plugin's bug, reported with where it is
        raise ComponentError(f"{where}: {probe_failure('aggregation', aggregation, probe, exc)}") from None
    if not isinstance(result, Tensor) or result.dim() != 0:
        got = f"a tensor of shape {tuple(result.shape)}" if isinstance(result, Tensor) else type(result).__name__
        raise _probe_error(aggregation, where, f"returned {got} on {probe}; an aggregation returns the "
                           "micro-batch's scalar loss, a 0-d tensor (.sum() or .mean() it)")
    if not torch.isfinite(result):
        raise _probe_error(aggregation, where, f"returned {result.item()} on {probe}; expected a finite loss "
                           "(divide by a count only when it is > 0: klear_lab.rl.aggregation.base.divide)")
    return result


def _check_gradient(aggregation: Any, result: Tensor, loss: Tensor, where: str) -> None:
    """Refuse a result with no autograd path to ``loss`` (``.item()`` wrapped in a new tensor, or a detached sum),
    or a gradient 0 on every token of a probe whose 5 tokens are all valid but one."""
    grad = None
    if result.requires_grad:
        with torch.enable_grad():
            (grad,) = torch.autograd.grad(result, loss, allow_unused=True)
    if grad is None or not grad.any():
        what = "no gradient path to the loss" if grad is None else "a gradient of 0 on every token"
        raise _probe_error(aggregation, where, f"returned a result with {what} on a probe loss and mask of [2, 3]: "
                           "every update would leave the policy unchanged")


def _probe_error(aggregation: Any, where: str, problem: str) -> ComponentError:
    """A ``ComponentError`` prefixed with the config key, naming the mode and its file."""
    return ComponentError(f"{where}: {component_error('aggregation', aggregation, problem)}")
