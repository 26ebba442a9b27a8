"""CISPO (two-sided verl form) and cispo_upper (TRL absolute cap): loss -sg(w) A logp."""

from __future__ import annotations

import math

import pytest
from clip_cases import close, run  # noqa: E402 - sibling helper module

from klear_lab.rl.clip.cispo import CISPOClip
from klear_lab.rl.clip.cispo_upper import CISPOUpperClip
from klear_lab.rl.clip.ppo import PPOClip


def test_cispo_two_sided_value_and_gradient():
    out, grad = run(CISPOClip(), [[0.5, 1.0, 1.5], [0.5, 1.0, 1.5]], [1.0, -1.0])
    # w = clip(r, 0.8, 1.28) = [0.8, 1, 1.28]; logp = -1 + log r; loss = -w * A * logp
    logp = [-1 + math.log(0.5), -1.0, -1 + math.log(1.5)]
    w = [0.8, 1.0, 1.28]
    close(
        out.loss,
        [
            [-wi * lp for wi, lp in zip(w, logp, strict=True)],
            [wi * lp for wi, lp in zip(w, logp, strict=True)],
        ],
    )
    # d loss / d logp = -w * A: no token loses its gradient (PPO would give 0 at r 1.5 A+ and r 0.5 A-)
    close(grad, [[-0.8, -1.0, -1.28], [0.8, 1.0, 1.28]])
    # weight clipped whatever the sign of A: r 1.5 with A=-1 gets 1.28, not PPO's 1.5
    _, ppo_grad = run(PPOClip(), [[1.5]], [-1.0])
    close(ppo_grad, [[1.5]])
    close(out.metrics["clipfrac_low"], 2 / 6)
    close(out.metrics["clipfrac_high"], 2 / 6)
    close(out.metrics["clipfrac"], 4 / 6)


def test_cispo_no_lower_bound():
    _, grad = run(CISPOClip(eps_low=1.0, eps_high=0.28), [[0.1, 2.0]], [1.0])
    # lower bound 0 -> w = r = 0.1; upper 1.28
    close(grad, [[-0.1, -1.28]])


def test_cispo_upper_absolute_cap():
    out, grad = run(CISPOUpperClip(), [[0.5, 3.0, 8.0]], [1.0], [[1, 1, 1]])
    # w = min(r, 5) = [0.5, 3, 5]; grad -w*A
    close(grad, [[-0.5, -3.0, -5.0]])
    close(out.loss[0, 2], 5.0 * (1 - math.log(8.0)))  # -5 * 1 * (-1 + log 8)
    close(out.metrics["clipfrac_high"], 1 / 3)
    close(out.metrics["clipfrac_low"], 0.0)


def test_cispo_padding_is_zero():
    out, grad = run(CISPOClip(), [[1.0, 1.0]], [1.0], [[1, 0]])
    close(out.loss, [[1.0, 0.0]])  # -1 * 1 * (-1)
    close(grad, [[-1.0, 0.0]])


@pytest.mark.parametrize(
    ("cls", "kwargs", "field"),
    [
        (CISPOClip, {"eps_low": 0.0}, "eps_low"),
        (CISPOClip, {"eps_low": 1.2}, "eps_low"),
        (CISPOClip, {"eps_high": 0.0}, "eps_high"),
        (CISPOUpperClip, {"cap": 0.0}, "cap"),
        (CISPOUpperClip, {"cap": 0.28}, "cap is an absolute bound on r, not a distance from 1: 0.28 < 1"),
    ],
)
def test_validation(cls, kwargs, field):
    with pytest.raises(ValueError, match=field):
        cls(**kwargs)
