"""GSPO: one geometric-mean ratio per sequence, token form sg(s_i) pi / sg(pi)."""

from __future__ import annotations

import math

import pytest
import torch

from klear_lab.rl.clip.gspo import GSPOClip


def run(log_ratios, adv, mask):
    """old_logp = -2, logp = -2 + log r per token; returns (output, dloss/dlogp)."""
    lr = torch.tensor(log_ratios, dtype=torch.float64)
    old_logp = torch.full_like(lr, -2.0)
    logp = (old_logp + lr).requires_grad_()
    out = GSPOClip()(
        logp, old_logp, torch.tensor(adv, dtype=torch.float64), torch.tensor(mask, dtype=torch.float64)
    )
    out.loss.sum().backward()
    return out, logp.grad


def close(actual, expected):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=torch.float64), atol=1e-9, rtol=0)


def test_sequence_level_clipping():
    out, grad = run(
        [[0.1, -0.1, 0.3], [3e-4, 1e-4, 5.0], [-1e-3, -1e-3, -1e-3], [-0.01, 0.0, 0.01]],
        [1.0, -1.0, -1.0, 1.0],
        [[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 1]],
    )
    s2 = math.exp(2e-4)  # seq 2: mean(3e-4, 1e-4), inside [1 - 3e-4, 1 + 4e-4]
    # seq 1: s = e^0.1 > 1.0004, A+ -> clipped: loss -1.0004 per token, grad 0
    # seq 2: A- unclipped -> loss s2 per valid token, grad -A*s2 = s2; padded token 0
    # seq 3: s = e^-0.001 < 0.9997, A- -> clipped: loss 0.9997, grad 0
    # seq 4: s = 1 although token ratios e^+-0.01 would be clipped per token -> loss -1, grad -1
    close(out.loss, [[-1.0004] * 3, [s2, s2, 0.0], [0.9997] * 3, [-1.0] * 3])
    close(grad, [[0.0] * 3, [s2, s2, 0.0], [0.0] * 3, [-1.0] * 3])
    m = out.metrics  # per sequence
    close(m["clipfrac_high"], 0.25)
    close(m["clipfrac_low"], 0.25)
    close(m["clipfrac"], 0.5)
    close(m["ratio_max"], math.exp(0.1))
    close(m["ratio_min"], math.exp(-1e-3))
    close(m["ratio_mean"], (math.exp(0.1) + s2 + math.exp(-1e-3) + 1.0) / 4)


def test_log_ratio_clamp_at_10():
    out, grad = run([[15.0, 15.0]], [-1.0], [[1, 1]])
    # log s = 15 clamped to 10: loss -A e^10, gradient 0 through the clamp
    close(out.loss, [[math.exp(10.0)] * 2])
    close(grad, [[0.0, 0.0]])


def test_seq_level_flag_and_validation():
    assert GSPOClip.seq_level is True
    assert GSPOClip().eps_low == pytest.approx(3e-4)
    with pytest.raises(ValueError, match="eps_low"):
        GSPOClip(eps_low=0.0)
