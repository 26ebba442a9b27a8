"""KL estimators k1/k2/k3 and DAPO overlong shaping."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from klear_lab.modules.rl_parts import sft_positives, shape_rewards
from klear_lab.rl.kl import kl_estimate, kl_k1, kl_k2, kl_k3
from klear_lab.rl.overlong import overlong_penalty


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


def test_shape_rewards_penalises_by_length_or_masks_what_was_cut():
    """``rl.overlong``: ``penalty`` lowers the scores by length only, and a correct answer it lowers is no
    positive for the α term (official code: final score == 1); ``mask`` drops the rows cut at the budget (not
    the one that ended with EOS exactly at it); ``none`` changes neither."""
    lengths, finished = torch.tensor([3, 18, 20, 20]), torch.tensor([True, True, True, False])
    mask = (torch.arange(20)[None, :] < lengths[:, None]).float()  # [4, 20]
    rollout = SimpleNamespace(response_mask=mask, finished=finished)
    scores = torch.tensor([1.0, 1.0, 0.0, 1.0])
    settings = {"overlong_buffer": 4, "overlong_penalty": 1.0, "max_new_tokens": 20}
    shaped, kept = shape_rewards(scores, rollout, SimpleNamespace(overlong="penalty", **settings))
    torch.testing.assert_close(shaped, torch.tensor([1.0, 0.5, -1.0, 0.0]))
    assert torch.equal(kept, mask)
    acc = scores == 1.0
    assert sft_positives(acc, scores, shaped).tolist() == [True, False, False, False]  # row 1: penalised
    assert sft_positives(acc, scores, scores).tolist() == [True, True, False, True]  # no penalty: acc
    shaped, kept = shape_rewards(scores, rollout, SimpleNamespace(overlong="mask", **settings))
    assert torch.equal(shaped, scores) and kept.sum(-1).tolist() == [3.0, 18.0, 20.0, 0.0]
    shaped, kept = shape_rewards(scores, rollout, SimpleNamespace(overlong="none", **settings))
    assert torch.equal(shaped, scores) and torch.equal(kept, mask)


def test_as_loss_terms_k1_pulls_nowhere_k2_follows_kl_pi_ref_and_k3_kl_ref_pi():
    """The estimators' expected gradients over a 6-token softmax, exactly: sum_y pi(y) grad k(y) (the loss term
    is differentiated on tokens sampled from pi, as verl's use_kl_loss does) against autograd of the exact KLs."""
    torch.manual_seed(0)
    ref = torch.log_softmax(torch.randn(6, dtype=torch.float64), -1)
    theta = torch.randn(6, dtype=torch.float64, requires_grad=True)

    def expected_grad(fn) -> torch.Tensor:
        logp = torch.log_softmax(theta, -1)
        (grad,) = torch.autograd.grad((logp.exp().detach() * fn(logp, ref)).sum(), theta)
        return grad

    def exact_grad(kl) -> torch.Tensor:
        logp = torch.log_softmax(theta, -1)
        (grad,) = torch.autograd.grad(kl(logp), theta)
        return grad

    kl_pi_ref = exact_grad(lambda logp: (logp.exp() * (logp - ref)).sum())
    kl_ref_pi = exact_grad(lambda logp: (ref.exp() * (ref - logp)).sum())
    torch.testing.assert_close(expected_grad(kl_k1), torch.zeros(6, dtype=torch.float64))
    torch.testing.assert_close(expected_grad(kl_k2), kl_pi_ref)
    torch.testing.assert_close(expected_grad(kl_k3), kl_ref_pi)
    assert not torch.allclose(kl_pi_ref, kl_ref_pi)  # the two directions differ here


def test_a_k1_loss_term_is_warned():
    from klear_lab.config.compose import compose

    rl = Path(__file__).resolve().parents[3] / "experiments/quickstart/rl.yaml"
    with pytest.warns(UserWarning, match=r"rl.kl_estimator=kl with rl.kl_coef=0.01: .* averages to 0"):
        compose(rl, ["rl.kl_coef=0.01", "rl.kl_estimator=kl"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compose(rl, ["rl.kl_coef=0.01", "rl.kl_estimator=k3"])
        compose(rl, ["rl.kl_estimator=k1"])  # no KL term: nothing to warn
