"""KL estimators k1/k2/k3 and DAPO overlong shaping."""

from __future__ import annotations

import math

import pytest
import torch

from klear_lab.rl.kl import kl_estimate, kl_k1, kl_k2, kl_k3
from klear_lab.rl.overlong import drop_truncated, overlong_penalty, truncated


def kl_and_grad(fn, logp, ref_logp):
    x = torch.tensor([logp], dtype=torch.float64, requires_grad=True)
    value = fn(x, torch.tensor([ref_logp], dtype=torch.float64))
    value.sum().backward()
    return value.item(), x.grad.item()


@pytest.mark.parametrize(
    ("fn", "value", "grad"),
    [
        # pi 0.5, ref 0.25: log rho = log 0.5; k1 = -log rho = log 2, grad 1
        (kl_k1, math.log(2), 1.0),
        # k2 = 0.5 (log 2)^2, grad logp - ref = log 2
        (kl_k2, 0.5 * math.log(2) ** 2, math.log(2)),
        # k3 = rho - log rho - 1 = 0.5 + log 2 - 1, grad 1 - rho = 0.5
        (kl_k3, 0.5 + math.log(2) - 1, 0.5),
    ],
)
def test_estimators(fn, value, grad):
    v, g = kl_and_grad(fn, math.log(0.5), math.log(0.25))
    assert v == pytest.approx(value, abs=1e-12)
    assert g == pytest.approx(grad, abs=1e-12)


def test_k3_clamped_to_10():
    v, g = kl_and_grad(kl_k3, 0.0, 5.0)  # rho = e^5: 148.4 - 5 - 1 -> 10, zero gradient
    assert v == 10.0
    assert g == 0.0


def test_names_and_aliases():
    logp, ref = torch.tensor([-1.0]), torch.tensor([-2.0])
    for name, alias in (("k1", "kl"), ("k2", "mse"), ("k3", "low_var_kl")):
        torch.testing.assert_close(kl_estimate(name, logp, ref), kl_estimate(alias, logp, ref))
    with pytest.raises(ValueError, match="kl_estimator"):
        kl_estimate("k4", logp, ref)


def test_overlong_penalty():
    lengths = torch.tensor([10, 16, 17, 18, 20, 25])
    # max 20, buffer 4: free up to 16, then -(len - 16) / 4, -1 from 20 on
    pen = overlong_penalty(lengths, max_len=20, buffer_len=4)
    torch.testing.assert_close(pen, torch.tensor([0.0, 0.0, -0.25, -0.5, -1.0, -1.0]))
    torch.testing.assert_close(overlong_penalty(lengths, 20, 4, factor=0.5), 0.5 * pen)
    with pytest.raises(ValueError, match="buffer_len"):
        overlong_penalty(lengths, max_len=20, buffer_len=0)


def test_truncation_mask():
    lengths = torch.tensor([3, 5, 5])
    assert truncated(lengths, 5).tolist() == [False, True, True]
    assert truncated(lengths, 5, finished=torch.tensor([True, True, False])).tolist() == [False, False, True]
    mask = torch.ones(3, 5)
    out = drop_truncated(mask, torch.tensor([False, True, False]))
    assert out.sum(dim=1).tolist() == [5.0, 0.0, 5.0]
