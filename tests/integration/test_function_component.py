"""A component registered as a function with a frozen dataclass of its hyperparameters
(``@CLIP.register("name", params=Params)`` on ``def name(params, logp, old_logp, adv, mask)``): built, listed,
checked and run as a class is. Before, only a frozen dataclass could be registered, and a function got "must be
a frozen dataclass"."""

from __future__ import annotations

import dataclasses
import json
import textwrap
from pathlib import Path

import pytest
import torch
from test_rl_run import LENGTH_REWARD, ROOT, tiny_rl_args

from klear_lab.cli import main
from klear_lab.config.compose import compose
from klear_lab.errors import component_error
from klear_lab.registry import CLIP, Registry
from klear_lab.rl.clip.ppo import PPOClip
from klear_lab.run import run_experiment

# PPO's surrogate written as a function: the same run as the built-in class `ppo`, step for step.
FUNCTION_CLIP = textwrap.dedent('''
    from dataclasses import dataclass

    from klear_lab.registry import CLIP
    from klear_lab.rl.clip.base import approx_kl, expand_adv, ppo_surrogate, token_clip_output, token_ratio


    @dataclass(frozen=True)
    class FnPPOParams:
        """PPO's hyperparameters (Schulman et al. 2017).

        Attributes:
            eps: Clip distance from 1 on both sides.
        """
        eps: float = 0.2


    @CLIP.register("fn_ppo", params=FnPPOParams)
    def fn_ppo(p, logp, old_logp, adv, mask):
        """PPO's clipped surrogate, as a function."""
        ratio = token_ratio(logp, old_logp)  # [N, T]
        loss, low, high = ppo_surrogate(ratio, expand_adv(adv, ratio), p.eps, p.eps)
        return token_clip_output(loss, ratio, mask, (low, high, None), approx_kl(logp, old_logp, mask))
''')


pytestmark = pytest.mark.usefixtures("registries_restored")  # the plugins' components go after each test


@pytest.fixture
def reward_plugin(tmp_path) -> Path:
    """test_rl_run's reward under its own name: that module's file may have registered the name in this process."""
    path = tmp_path / "fn_reward.py"
    path.write_text(LENGTH_REWARD.replace('"test_digit_count"', '"fn_test_digit_count"'))
    return path


@pytest.fixture
def function_clip(tmp_path) -> Path:
    path = tmp_path / "fn_clip.py"
    path.write_text(FUNCTION_CLIP)
    return path


def test_a_function_clip_runs_as_the_class_it_rewrites(tmp_path, reward_plugin, function_clip):
    """Two off-policy minibatches, so the clip's surrogate shapes the second update: the function form of PPO
    and the built-in `ppo` give the same losses, ratios and clip fractions."""
    runs = {}
    for clip in ("ppo", "fn_ppo"):
        args = tiny_rl_args(tmp_path / clip, reward_plugin, clip, 2)
        args = [f"plugins=[{reward_plugin},{function_clip}]" if a.startswith("plugins=") else a for a in args]
        args.append("rl.reward=fn_test_digit_count")
        cfg = compose(ROOT / "experiments/quickstart/rl.yaml", args)
        runs[clip] = run_experiment(cfg).metrics
    assert cfg["rl"]["clip"] == {"name": "fn_ppo", "eps": 0.2}  # the params' defaults, in the saved config
    assert runs["fn_ppo"]["rl/updates_per_step"] == 2.0
    keys = [k for k in runs["ppo"] if k.startswith(("rl/", "train/")) and not k.startswith("rl/seconds")]
    assert {"rl/clipfrac", "rl/ratio_max", "train/loss"} <= set(keys)
    assert {k: runs["fn_ppo"].get(k) for k in keys} == pytest.approx({k: runs["ppo"][k] for k in keys})


def test_a_function_component_is_built_listed_and_pointed_at(function_clip, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["components", "clip", "--plugin", str(function_clip)]) == 0
    out = capsys.readouterr().out
    assert "fn_ppo" in out and "PPO's clipped surrogate, as a function." in out
    assert "Clip distance from 1 on both sides." in out  # the params class's documented field
    clip = CLIP.build({"name": "fn_ppo", "eps": 0.3})
    assert dataclasses.is_dataclass(clip) and clip.eps == 0.3 and clip.registered_name == "fn_ppo"
    logp = torch.tensor([[0.0, -1.0]], requires_grad=True)  # [N=1, T=2]; ratios e^0.5 (clipped), e^-0.5
    old = torch.tensor([[-0.5, -0.5]])
    out = clip(logp, old, torch.tensor([1.0]), torch.ones(1, 2))
    expected = PPOClip(eps=0.3)(logp, old, torch.tensor([1.0]), torch.ones(1, 2))
    assert torch.equal(out.loss, expected.loss)
    out.loss.sum().backward()
    assert logp.grad.tolist()[0] == pytest.approx([0.0, -torch.exp(torch.tensor(-0.5)).item()])  # clipped: no grad
    assert f"{function_clip}:" in str(component_error("clip", clip, "broke"))  # the function's file and line
    with pytest.raises(dataclasses.FrozenInstanceError):
        clip.eps = 0.1  # type: ignore[misc]


def _registry() -> Registry:
    return Registry("clip", None, "test clips", ("logp", "old_logp", "adv", "mask"))


@dataclasses.dataclass(frozen=True)
class Params:
    eps: float = 0.2


def test_the_function_is_returned_unchanged_and_called_with_its_params():
    registry = _registry()

    @registry.register("doubled", params=Params)
    def doubled(p, logp, old_logp, adv, mask):
        return p.eps * 2

    assert doubled(Params(0.5), None, None, None, None) == 1.0  # still the function, for its own unit tests
    assert registry.build({"name": "doubled", "eps": 0.25})(None, None, None, None) == 0.5
    assert registry.params("doubled") == {"eps": 0.2}


def test_mistakes_name_the_component_and_the_fix():
    registry = _registry()
    with pytest.raises(TypeError, match=r"clip 'bare': the function .*clip_function needs its hyperparameters: "
                                        r"@CLIP.register\('bare', params=<a frozen dataclass>\)"):
        registry.register("bare")(_clip_function())

    @dataclasses.dataclass
    class Loose:
        eps: float = 0.2

    with pytest.raises(TypeError, match="params='.*Loose' must be a frozen dataclass"):
        registry.register("loose", params=Loose)(_clip_function())
    with pytest.raises(TypeError, match=r"params= goes with a function `def cls\(params, logp, old_logp, adv, mask\)`"):
        registry.register("cls", params=Params)(PPOClip)

    def two_args(p, logp):
        return logp

    with pytest.raises(TypeError, match=r"two_args must take \(params, logp, old_logp, adv, mask\); it takes "
                                        r"\(p, logp\)"):
        registry.register("two", params=Params)(two_args)

    @dataclasses.dataclass(frozen=True)
    class NoDefault:
        eps: float

    with pytest.raises(TypeError, match="has no default"):
        registry.register("nodefault", params=NoDefault)(_clip_function())
    assert registry.snapshot() == {}  # nothing half-registered
    with pytest.raises(TypeError, match="a source is a frozen dataclass with methods"):
        Registry("source", "klear_lab.data.sources", "sources").register("fn_source", params=Params)(_clip_function())


def _clip_function():
    def clip_function(p, logp, old_logp, adv, mask):
        return json.dumps(p.eps)

    return clip_function
