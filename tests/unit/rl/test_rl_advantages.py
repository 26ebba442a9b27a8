"""Advantage estimators on a hand-computed [2, 4] example."""

from __future__ import annotations

import pytest
import torch
from clip_cases import shipped  # sibling helper module

from klear_lab.registry import ADVANTAGE
from klear_lab.rl.advantages.dr_grpo import DrGRPOAdvantage
from klear_lab.rl.advantages.grpo import GRPOAdvantage
from klear_lab.rl.advantages.rloo import RLOOAdvantage

REWARDS = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 0.0]], dtype=torch.float64)


def close(actual, expected, atol=1e-9):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=torch.float64), atol=atol, rtol=0)


def test_grpo():
    # row 1: mean 0.5, unbiased std sqrt(1/3) -> +-0.5 / 0.57735 = +-0.866025
    # row 2: mean 0.75, unbiased std sqrt(0.75/3) = 0.5 -> [0.5, 0.5, 0.5, -1.5]
    a = 0.5 / ((1 / 3) ** 0.5 + 1e-6)
    b = 1 / (0.5 + 1e-6)
    close(GRPOAdvantage()(REWARDS), [[a, -a, -a, a], [0.25 * b, 0.25 * b, 0.25 * b, -0.75 * b]])
    close(
        GRPOAdvantage()(REWARDS),
        [[0.866025, -0.866025, -0.866025, 0.866025], [0.5, 0.5, 0.5, -1.5]],
        atol=1e-5,
    )


def test_dr_grpo():
    close(DrGRPOAdvantage()(REWARDS), [[0.5, -0.5, -0.5, 0.5], [0.25, 0.25, 0.25, -0.75]])


def test_rloo_equals_leave_one_out_mean():
    # row 2, first: 1 - mean(1, 1, 0) = 1/3; last: 0 - mean(1, 1, 1) = -1
    close(RLOOAdvantage()(REWARDS), [[2 / 3, -2 / 3, -2 / 3, 2 / 3], [1 / 3, 1 / 3, 1 / 3, -1.0]])
    torch.manual_seed(0)
    r = torch.randn(3, 5, dtype=torch.float64)
    loo = torch.stack([torch.cat([r[:, :i], r[:, i + 1 :]], dim=1).mean(dim=1) for i in range(5)], dim=1)
    close(RLOOAdvantage()(r), (r - loo).tolist())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_equal_rewards_give_exactly_zero(dtype):
    """float32 as the rewards arrive: a group of eight 0.7s has a mean a few 1e-8 off and a std of that size,
    so GRPO's normalisation gave each response an advantage of +0.056 (0.4: -0.029) unless zeroed."""
    flat = torch.tensor([[0.7] * 8, [0.4] * 8, [0.1] * 8, [1.4] * 8, [0.3] * 8], dtype=dtype)
    for name in shipped(ADVANTAGE):
        adv = ADVANTAGE.build({"name": name})(flat)
        assert adv.dtype == dtype and torch.equal(adv, torch.zeros_like(flat)), name
    mixed = torch.tensor([[0.7] * 7 + [0.1]], dtype=dtype)  # one differs: not a flat group
    assert (ADVANTAGE.build({"name": "grpo"})(mixed)[0, 0] > 0).item()


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
def test_group_size_checks(name):
    cls = ADVANTAGE.get(name)
    assert cls.min_group_size == 2
    with pytest.raises(ValueError, match="group size"):
        cls()(torch.ones(3, 1))
    with pytest.raises(ValueError, match=r"\[B, G\]"):
        cls()(torch.ones(4))


def test_grpo_eps_validation():
    with pytest.raises(ValueError, match="eps"):
        GRPOAdvantage(eps=0.0)


def test_an_advantage_of_the_wrong_shape_is_refused_naming_the_estimator():
    """A plugin returning one advantage per group [B] ran its rollouts, then failed with an IndexError deep
    in the update (found by a CLI hunt): now a ComponentError at the call, and a ConfigError at --dry-run."""
    from klear_lab.errors import ComponentError, ConfigError
    from klear_lab.rl.advantages.base import checked_advantages, probe_advantage

    class PerGroup:
        def __call__(self, rewards):
            return rewards.mean(-1)

    class Raises:
        def __call__(self, rewards):
            raise KeyError("oops")

    with pytest.raises(ComponentError, match=r"advantage 'PerGroup' \(.*test_rl_advantages.py:\d+\) returned "
                                             r"shape \(2,\) for rewards of shape \(2, 4\)"):
        checked_advantages(PerGroup(), REWARDS)
    with pytest.raises(ConfigError, match=r"rl.advantage: advantage 'PerGroup' .* returned shape \(2,\)"):
        probe_advantage(PerGroup(), "rl.advantage")
    with pytest.raises(ConfigError, match=r"rl.advantage: advantage 'Raises' .* failed on probe rewards of "
                                          r"\[2, 4\]: KeyError: 'oops' \(.*test_rl_advantages.py:\d+\)"):
        probe_advantage(Raises(), "rl.advantage")
    for name in shipped(ADVANTAGE):
        probe_advantage(ADVANTAGE.build({"name": name}), "rl.advantage")
        assert checked_advantages(ADVANTAGE.build({"name": name}), REWARDS).shape == REWARDS.shape


def test_a_run_with_an_advantage_of_the_wrong_shape_stops_before_any_data_or_model(tmp_path, capsys):
    """``prepare_rl`` probes the estimator as it probes the clip: the run is refused (exit 2, no run directory)."""
    from pathlib import Path

    from klear_lab.cli import main

    plugin = tmp_path / "per_group.py"
    plugin.write_text("from dataclasses import dataclass\nfrom klear_lab.registry import ADVANTAGE\n\n\n"
                      "@ADVANTAGE.register('per_group_test')\n@dataclass(frozen=True)\nclass PerGroup:\n"
                      "    def __call__(self, rewards):\n        return rewards.mean(-1)\n")
    rl = Path(__file__).resolve().parents[3] / "experiments/quickstart/rl.yaml"
    runs = tmp_path / "runs"
    assert main(["train", str(rl), "model.init_from=null", f"plugins=[{plugin}]", "rl.advantage=per_group_test",
                 f"run.out_dir={runs}", "tracking.wandb.enabled=false"]) == 2
    err = capsys.readouterr().err
    assert "rl.advantage: advantage 'per_group_test'" in err and "returned shape (2,)" in err, err
    assert not runs.exists()
