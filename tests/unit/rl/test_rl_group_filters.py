"""Group filters: zero-variance on binary accuracy vs shaped score."""

from __future__ import annotations

import pytest
import torch

from klear_lab.rl.group_filters.none import NoGroupFilter
from klear_lab.rl.group_filters.zero_variance import ZeroVarianceFilter

SCORES = torch.tensor(
    [
        [1.0, 1.0, 1.0],  # all correct
        [0.0, 0.0, 0.0],  # all wrong
        [0.25, 0.5, 0.0],  # partial soft scores, nobody fully correct
        [1.0, 0.5, 0.0],  # one fully correct
    ]
)
ACC = SCORES == 1.0


def test_acc_metric_drops_partial_only_groups():
    keep = ZeroVarianceFilter()(SCORES, ACC)
    assert keep.tolist() == [False, False, False, True]


def test_score_metric_keeps_partial_groups():
    keep = ZeroVarianceFilter(metric="score")(SCORES, ACC)
    assert keep.tolist() == [False, False, True, True]


def test_group_of_one_is_kept():
    assert ZeroVarianceFilter()(torch.ones(2, 1), torch.ones(2, 1, dtype=torch.bool)).tolist() == [True, True]


def test_none_keeps_all():
    keep = NoGroupFilter()(SCORES, ACC)
    assert keep.dtype == torch.bool
    assert keep.tolist() == [True] * 4


def test_metric_validation():
    with pytest.raises(ValueError, match="metric"):
        ZeroVarianceFilter(metric="reward")
