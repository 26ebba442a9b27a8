"""Aggregation modes: hand values/gradients, and exactness under micro-batch gradient accumulation."""

from __future__ import annotations

import pytest
import torch
from clip_cases import shipped  # sibling helper module

from klear_lab.registry import AGGREGATION
from klear_lab.rl.aggregation.seq_mean_token_mean import SeqMeanTokenMean
from klear_lab.rl.aggregation.seq_mean_token_sum import SeqMeanTokenSum
from klear_lab.rl.aggregation.seq_mean_token_sum_norm import SeqMeanTokenSumNorm
from klear_lab.rl.aggregation.token_mean import TokenMean
from klear_lab.rl.types import AggContext

MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])


def run(agg):
    """loss [[1,2,3],[4,5,99]] with the last token padded; returns (value, grad)."""
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 99.0]], requires_grad=True)
    value = agg(loss, MASK, AggContext.from_mask(MASK))
    value.backward()
    return value, loss.grad


@pytest.mark.parametrize(
    ("agg", "value", "grad"),
    [
        # 15 / 5 tokens
        (TokenMean(), 3.0, [[0.2, 0.2, 0.2], [0.2, 0.2, 0.0]]),
        # (6/3 + 9/2) / 2 seqs = 3.25; d/dl = 1/(|o_i| * 2)
        (SeqMeanTokenMean(), 3.25, [[1 / 6] * 3, [0.25, 0.25, 0.0]]),
        # (6 + 9) / 2 seqs
        (SeqMeanTokenSum(), 7.5, [[0.5] * 3, [0.5, 0.5, 0.0]]),
        # 15 / (2 seqs * max_len 3)
        (SeqMeanTokenSumNorm(), 2.5, [[1 / 6] * 3, [1 / 6, 1 / 6, 0.0]]),
        # 15 / (2 * 5)
        (SeqMeanTokenSumNorm(norm_len=5), 1.5, [[0.1] * 3, [0.1, 0.1, 0.0]]),
    ],
)
def test_hand_values(agg, value, grad):
    v, g = run(agg)
    torch.testing.assert_close(v, torch.tensor(value))
    torch.testing.assert_close(g, torch.tensor(grad))


def test_context_from_mask():
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    ctx = AggContext.from_mask(mask)
    assert (ctx.num_tokens, ctx.num_seqs, ctx.max_len) == (3.0, 2.0, 3)  # empty row not counted
    assert AggContext.from_mask(mask, max_len=64).max_len == 64
    with pytest.raises(ValueError, match="max_len"):
        AggContext(num_tokens=1.0, num_seqs=1.0, max_len=0)
    assert ctx.num_rows is None and AggContext.from_mask(mask, count_rows=True).num_rows == 3.0


def test_dr_grpo_divides_by_every_row_even_a_fully_masked_one():
    """A truncated response that ``rl.overlong: mask`` drops keeps Dr. GRPO's divisor B x L constant
    (TRL's dr_grpo); seq-mean-token-mean still averages over the responses that have tokens."""
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    loss = torch.ones(2, 4, requires_grad=True)
    ctx = AggContext.from_mask(mask, count_rows=True)
    value = SeqMeanTokenSumNorm()(loss, mask, ctx)
    value.backward()
    torch.testing.assert_close(value, torch.tensor(2 / (2 * 4)))  # not 2 / (1 x 4)
    torch.testing.assert_close(loss.grad, mask / 8)
    torch.testing.assert_close(SeqMeanTokenMean()(loss, mask, ctx), torch.tensor(1.0))


@pytest.mark.parametrize(
    "name", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
)
def test_micro_batch_accumulation_is_exact(name):
    torch.manual_seed(0)
    agg = AGGREGATION.build({"name": name})
    lengths = torch.tensor([5, 2, 7, 1, 3, 4])  # unequal lengths
    T = int(lengths.max())
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()  # [6, 7]
    x = torch.randn(6, T, dtype=torch.float64, requires_grad=True)
    ctx = AggContext.from_mask(mask)
    agg(x * x, mask, ctx).backward()
    full_value, full_grad = agg((x * x).detach(), mask, ctx), x.grad.clone()
    x.grad = None
    total = torch.zeros((), dtype=torch.float64)
    for rows in (slice(0, 2), slice(2, 6)):  # each micro-batch padded to its own width
        width = int(lengths[rows].max())
        part = agg(x[rows, :width] ** 2, mask[rows, :width], ctx)
        part.backward()
        total = total + part.detach()
    torch.testing.assert_close(total, full_value)
    torch.testing.assert_close(x.grad, full_grad)


def test_empty_batch_gives_zero():
    loss = torch.ones(1, 2, requires_grad=True)
    mask = torch.zeros(1, 2)
    for name in shipped(AGGREGATION):
        value = AGGREGATION.build({"name": name})(loss, mask, AggContext.from_mask(mask))
        assert value.item() == 0.0
        assert value.requires_grad


def test_norm_len_validation():
    with pytest.raises(ValueError, match="norm_len"):
        SeqMeanTokenSumNorm(norm_len=0)
