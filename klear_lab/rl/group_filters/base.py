"""The output check of any group filter (a plugin's too): one keep flag per group, and its probe.

A filter is called as ``group_filter(scores, acc)`` with the shaped scores [B, G] (float) and full
correctness [B, G] (bool) of a rollout step's B groups of G responses, and returns ``keep`` [B] bool.
The run trains on ``keep.nonzero()``: a per-completion mask [B, G] gave B*G "group" indices (rl/trained_groups
256 of 16 prompts) and trained on the wrong groups without an error.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from klear_lab.errors import ComponentError, component_error, probe_failure


def keep_problem(keep: Any, groups: int) -> str | None:
    """What is wrong with a filter's ``keep`` for ``groups`` groups (None: nothing): a bool tensor [B], or one of
    0/1 values (an integer or float mask)."""
    if not isinstance(keep, Tensor):
        return f"returned {type(keep).__name__}"
    if keep.shape != (groups,):
        return f"returned a tensor of shape {tuple(keep.shape)}"
    other = keep[(keep != 0) & (keep != 1)] if keep.dtype != torch.bool else keep[:0]
    if other.numel():
        return f"returned {keep.dtype} values other than 0 and 1 (such as {other[:3].tolist()})"
    return None


def checked_keep(group_filter: Any, scores: Tensor, acc: Tensor) -> Tensor:
    """``group_filter(scores, acc)`` as a bool tensor [B], checked to be one flag per group of ``scores`` [B, G]."""
    keep = group_filter(scores, acc)
    problem = keep_problem(keep, scores.shape[0])
    if problem is not None:
        raise component_error("group_filter", group_filter, f"{problem} for scores of shape {tuple(scores.shape)}; "
                              "a group filter returns one keep flag per group (prompt), a bool tensor of shape [B]")
    return keep.bool()


def probe_group_filter(group_filter: Any, where: str) -> None:
    """Call ``group_filter`` once on tiny scores [3, 4] (a mixed group, an all-correct one, an all-wrong one): one
    that raises or returns anything but a keep flag per group is a ``ConfigError`` naming ``where`` before any
    model loads, not a run that trains on the wrong groups (or fails after its first rollouts)."""
    scores = torch.tensor([[1.0, 0.0, 0.5, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])  # [B=3, G=4]
    acc = scores == 1.0
    try:
        checked_keep(group_filter, scores, acc)
    except ComponentError as exc:
        raise ComponentError(f"{where}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a plugin's bug, reported with where it is
        failure = probe_failure("group_filter", group_filter, f"probe scores and acc of {list(scores.shape)}", exc)
        raise ComponentError(f"{where}: {failure}") from None
