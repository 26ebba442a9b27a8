"""Every RL component builds from its defaults through the registry and returns the contract shapes."""

from __future__ import annotations

import pytest
import torch
from clip_cases import shipped  # sibling helper module

from klear_lab.registry import ADVANTAGE, AGGREGATION, CLIP, GROUP_FILTER
from klear_lab.rl.clip.base import METRIC_KEYS, ClipOutput
from klear_lab.rl.types import AggContext


def test_registered_names():
    assert set(CLIP.names()) >= {"ppo", "clip_higher", "gppo", "cispo", "cispo_upper", "gspo", "reinforce"}
    assert set(AGGREGATION.names()) >= {
        "token-mean",
        "seq-mean-token-mean",
        "seq-mean-token-sum",
        "seq-mean-token-sum-norm",
    }
    assert set(ADVANTAGE.names()) >= {"grpo", "dr_grpo", "rloo"}
    assert set(GROUP_FILTER.names()) >= {"none", "zero_variance"}


def test_clip_contract_for_every_variant():
    torch.manual_seed(0)
    logp = (-torch.rand(4, 5)).requires_grad_()
    old = logp.detach() + 0.1 * torch.randn(4, 5)
    adv = torch.tensor([1.0, -1.0, 0.5, 0.0])
    mask = torch.ones(4, 5)
    mask[1, 3:] = 0.0
    for name in shipped(CLIP):
        clip = CLIP.build({"name": name})
        assert isinstance(clip.seq_level, bool)
        out = clip(logp, old, adv, mask)
        assert isinstance(out, ClipOutput)
        assert out.loss.shape == (4, 5)
        assert set(out.metrics) == set(METRIC_KEYS), name
        assert all(v.dim() == 0 and not v.requires_grad for v in out.metrics.values())
        assert torch.all(out.loss[1, 3:] == 0), name
        grad = torch.autograd.grad(out.loss.sum(), logp)[0]
        assert torch.all(grad[1, 3:] == 0), name
        assert torch.isfinite(grad).all(), name


def test_other_axes_build_from_defaults():
    rewards = torch.tensor([[1.0, 0.0, 1.0, 1.0]])
    for name in shipped(ADVANTAGE):
        assert ADVANTAGE.build({"name": name})(rewards).shape == (1, 4)
    for name in shipped(GROUP_FILTER):
        keep = GROUP_FILTER.build({"name": name})(rewards, rewards == 1.0)
        assert keep.shape == (1,)
        assert keep.dtype == torch.bool
    mask = torch.ones(2, 3)
    for name in shipped(AGGREGATION):
        assert (
            AGGREGATION.build({"name": name})(torch.ones(2, 3), mask, AggContext.from_mask(mask)).dim() == 0
        )


def test_a_clip_that_cannot_run_is_refused_before_anything_loads():
    """``--validate-only`` said OK for a plugin clip that raised or returned a Tensor: its trials failed in
    their first update, after the sweep's other arms had run (found by a new-user walkthrough)."""
    import torch

    from klear_lab.errors import ConfigError
    from klear_lab.registry import CLIP
    from klear_lab.rl.clip.base import ClipOutput, probe_clip

    class Raises:
        def __call__(self, logp, old_logp, adv, mask):
            raise IndexError("oops")

    class ReturnsTensor:
        def __call__(self, logp, old_logp, adv, mask):
            return logp

    class PerSequence:
        def __call__(self, logp, old_logp, adv, mask):
            return ClipOutput(loss=logp.sum(-1), metrics={})

    with pytest.raises(ConfigError, match=r"rl.clip: clip 'Raises' \(.*test_rl_components.py:\d+\) failed on a "
                                          r"probe batch of \[2, 3\] tokens: IndexError: oops "
                                          r"\(.*test_rl_components.py:\d+\)"):
        probe_clip(Raises(), "rl.clip")
    with pytest.raises(ConfigError, match=r"clip 'ReturnsTensor' \(.*test_rl_components.py:\d+\) returned Tensor; "
                                          "a clip variant returns ClipOutput"):
        probe_clip(ReturnsTensor(), "rl.clip")
    with pytest.raises(ConfigError, match=r"clip 'PerSequence' \(.*\.py:\d+\) returned a loss of \(2,\); "
                                          "expected finite per-token losses"):
        probe_clip(PerSequence(), "rl.clip")
    for name in shipped(CLIP):  # every shipped variant passes, with the statistics the sweeps check against
        assert "clipfrac" in probe_clip(CLIP.build({"name": name}), "rl.clip"), name
    assert torch.is_grad_enabled()


def test_a_clip_that_trains_nothing_or_logs_a_non_number_is_refused():
    """A clip computing its ratio from ``logp.detach()`` passed the probe and ``--dry-run``; its run trained
    nothing (rl/grad_norm 0.0 at every update) and exited 0. One with ``metrics={"foo": "bar"}`` passed too
    and crashed in its first update with a ValueError from ``float`` (exit 1). Found by a CLI hunt."""
    from klear_lab.errors import ComponentError
    from klear_lab.rl.clip.base import ClipOutput, expand_adv, ppo_surrogate, probe_clip, token_ratio

    class Detached:
        def __call__(self, logp, old_logp, adv, mask):
            ratio = token_ratio(logp.detach(), old_logp)
            return ClipOutput(loss=ppo_surrogate(ratio, expand_adv(adv, ratio), 0.2, 0.2)[0] * mask, metrics={})

    class ZeroGradient:
        def __call__(self, logp, old_logp, adv, mask):
            return ClipOutput(loss=logp * 0.0 * mask, metrics={})

    class Metrics:
        def __init__(self, metrics):
            self.metrics = metrics

        def __call__(self, logp, old_logp, adv, mask):
            return ClipOutput(loss=-logp * expand_adv(adv, logp) * mask, metrics=self.metrics)

    with pytest.raises(ComponentError, match=r"rl.clip: clip 'Detached' \(.*test_rl_components.py:\d+\) "
                                             "returned a loss with no gradient path to logp"):
        probe_clip(Detached(), "rl.clip")
    with pytest.raises(ComponentError, match="gradient wrt logp is 0 on every token"):
        probe_clip(ZeroGradient(), "rl.clip")
    with pytest.raises(ComponentError, match=r"clip 'Metrics' .* returned metric 'foo' = 'bar'; a metric is"):
        probe_clip(Metrics({"ok": 1.0, "foo": "bar"}), "rl.clip")
    with pytest.raises(ComponentError, match=r"returned metric 'per_token' = a tensor of shape \(2, 3\)"):
        probe_clip(Metrics({"per_token": torch.ones(2, 3)}), "rl.clip")
    assert probe_clip(Metrics({"n": 2, "m": torch.tensor(0.5)}), "rl.clip") == {"n", "m"}
    with torch.no_grad():  # a caller without grad mode does not make every shipped clip look gradient-free
        for name in shipped(CLIP):
            assert "clipfrac" in probe_clip(CLIP.build({"name": name}), "rl.clip"), name
    # the run-time site, for a clip built without the probe
    from klear_lab.modules.rl_parts import float_metrics

    with pytest.raises(ComponentError, match=r"clip 'Metrics' .* returned metric 'foo' = 'bar'"):
        float_metrics(Metrics({}), {"loss": torch.tensor(1.0), "foo": "bar"})
    assert float_metrics(Metrics({}), {"loss": torch.tensor(1.5), "num_tokens": torch.tensor(3.0)}) == {"loss": 1.5}
