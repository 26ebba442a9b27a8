"""Shared helpers of the RL component tests: tokens with exact ratios, exact comparisons, built-in names."""

from __future__ import annotations

import torch


def run(clip, ratios, adv, mask=None):
    """Tokens with exact ratios (old_logp = -1, logp = -1 + log r); returns (output, dloss/dlogp)."""
    r = torch.tensor(ratios, dtype=torch.float64)
    old_logp = torch.full_like(r, -1.0)
    logp = (old_logp + r.log()).requires_grad_()
    m = torch.ones_like(r) if mask is None else torch.tensor(mask, dtype=torch.float64)
    out = clip(logp, old_logp, torch.tensor(adv, dtype=torch.float64), m)
    out.loss.sum().backward()
    return out, logp.grad


def close(actual, expected):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=torch.float64), atol=1e-9, rtol=0)


def shipped(registry) -> list[str]:
    """The registry's built-in names: not components a test registered in this process (pytest-xdist
    runs test files in any order in one worker)."""
    return [n for n in registry.names() if registry.get(n).__module__.startswith("klear_lab.")]
