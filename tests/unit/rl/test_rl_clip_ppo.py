"""PPO / clip-higher / reinforce: values and gradients d(loss)/d(logp) on hand-computed tokens."""

from __future__ import annotations

import math

import pytest
from clip_cases import close, run  # noqa: E402 - sibling helper module

from klear_lab.rl.clip.base import METRIC_KEYS
from klear_lab.rl.clip.clip_higher import ClipHigherClip
from klear_lab.rl.clip.ppo import PPOClip
from klear_lab.rl.clip.reinforce import ReinforceClip


def test_ppo_cases():
    out, grad = run(PPOClip(), [[0.5, 1.0, 1.5], [0.5, 1.0, 1.5]], [1.0, -1.0])
    # A=+1: r 0.5 -> -min(0.5, 0.8) = -0.5, grad -r = -0.5; r 1 -> -1, grad -1; r 1.5 -> -1.2, clipped, grad 0
    # A=-1: r 0.5 -> -min(-0.5, -0.8) = 0.8, clipped, grad 0; r 1 -> 1, grad 1; r 1.5 -> 1.5, grad 1.5
    close(out.loss, [[-0.5, -1.0, -1.2], [0.8, 1.0, 1.5]])
    close(grad, [[-0.5, -1.0, 0.0], [0.0, 1.0, 1.5]])


def test_clip_higher_differs_from_ppo_between_bounds():
    out, grad = run(ClipHigherClip(), [[1.25, 1.5, 0.7]], [1.0])
    # r 1.25 < 1.28 -> unclipped: loss -1.25, grad -1.25 (PPO eps 0.2 would clip: -1.2, grad 0)
    # r 1.5 -> -1.28, grad 0; r 0.7 with A>0 -> unclipped -0.7, grad -0.7
    close(out.loss, [[-1.25, -1.28, -0.7]])
    close(grad, [[-1.25, 0.0, -0.7]])
    _, ppo_grad = run(PPOClip(), [[1.25]], [1.0])
    close(ppo_grad, [[0.0]])


@pytest.mark.parametrize("clip", [PPOClip(dual_clip_c=3.0), ClipHigherClip(dual_clip_c=3.0)])
def test_dual_clip_zero_gradient(clip):
    out, grad = run(clip, [[4.0, 2.0, 4.0]], [-1.0])
    # A=-1: r 4 > c=3 -> constant -c*A = 3, grad 0; r 2 < c -> loss 2, grad 2
    close(out.loss, [[3.0, 2.0, 3.0]])
    close(grad, [[0.0, 2.0, 0.0]])
    close(out.metrics["clipfrac_dual"], 2 / 3)
    _, no_dual = run(type(clip)(), [[4.0]], [-1.0])
    close(no_dual, [[4.0]])  # without dual clip: loss 4 r-linear, grad 4


def test_dual_clip_ignores_positive_advantage():
    out, grad = run(PPOClip(dual_clip_c=3.0), [[4.0]], [2.0])
    close(out.loss, [[-2.4]])  # -A * 1.2, high clip, grad 0
    close(grad, [[0.0]])


def test_mask_zeroes_padding_and_metrics():
    out, grad = run(ClipHigherClip(), [[0.5, 1.5, 9.0], [1.1, 0.6, 1.0]], [1.0, -1.0], [[1, 1, 0], [1, 1, 1]])
    close(out.loss[0, 2], 0.0)
    close(grad[0, 2], 0.0)
    m = out.metrics
    assert set(m) == set(METRIC_KEYS)
    # valid: (0.5,A+) (1.5,A+ high) (1.1,A-) (0.6,A- low) (1.0,A-): low 1/5, high 1/5
    close(m["clipfrac_low"], 0.2)
    close(m["clipfrac_high"], 0.2)
    close(m["clipfrac"], 0.4)
    close(m["ratio_mean"], (0.5 + 1.5 + 1.1 + 0.6 + 1.0) / 5)
    close(m["ratio_min"], 0.5)
    close(m["ratio_max"], 1.5)  # the padded 9.0 is ignored
    kl = sum(0.5 * math.log(r) ** 2 for r in (0.5, 1.5, 1.1, 0.6, 1.0)) / 5
    close(m["approx_kl"], kl)
    assert all(not v.requires_grad for v in m.values())


def test_reinforce_is_unclipped():
    out, grad = run(ReinforceClip(), [[0.5, 1.5, 3.0], [0.5, 1.5, 3.0]], [1.0, -2.0])
    # loss = -r*A, grad = -r*A
    close(out.loss, [[-0.5, -1.5, -3.0], [1.0, 3.0, 6.0]])
    close(grad, [[-0.5, -1.5, -3.0], [1.0, 3.0, 6.0]])
    close(out.metrics["clipfrac"], 0.0)


def test_zero_advantage_zero_gradient():
    _, grad = run(PPOClip(), [[0.5, 1.0, 1.5]], [0.0])
    close(grad, [[0.0, 0.0, 0.0]])


@pytest.mark.parametrize(
    ("cls", "kwargs", "field"),
    [
        (PPOClip, {"eps": 0.0}, "eps"),
        (PPOClip, {"eps": 1.0}, "eps"),
        (PPOClip, {"dual_clip_c": 1.0}, "dual_clip_c"),
        (ClipHigherClip, {"eps_low": 1.5}, "eps_low"),
        (ClipHigherClip, {"eps_high": -0.1}, "eps_high"),
        (ClipHigherClip, {"dual_clip_c": 0.5}, "dual_clip_c"),
    ],
)
def test_validation(cls, kwargs, field):
    with pytest.raises(ValueError, match=field):
        cls(**kwargs)
