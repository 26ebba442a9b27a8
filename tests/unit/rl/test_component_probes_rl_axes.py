"""Group filter, aggregation and rollout engine plugins that break their axis' contract are refused before any
model loads (exit 2, naming the config key, the component and its file), as clips and advantages are."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from clip_cases import shipped  # sibling helper module

from klear_lab.errors import ComponentError, ConfigError
from klear_lab.registry import AGGREGATION, GROUP_FILTER, ROLLOUT
from klear_lab.rl.aggregation.base import probe_aggregation
from klear_lab.rl.group_filters.base import checked_keep, probe_group_filter
from klear_lab.rl.rollout.base import check_rollout_engine

QUICK_RL = Path(__file__).resolve().parents[3] / "experiments/quickstart/rl.yaml"
HERE = r"test_component_probes_rl_axes.py:\d+"


def train(tmp_path: Path, plugin_source: str, *overrides: str) -> int:
    """``klear-lab train`` of the quickstart RL config with a plugin file holding ``plugin_source`` (one rollout
    step: a run the probes let through ends soon, not after 100 steps)."""
    from klear_lab.cli import main

    plugin = tmp_path / "bad_component.py"
    plugin.write_text(textwrap.dedent(plugin_source))
    return main(["train", str(QUICK_RL), "model.init_from=null", f"plugins=[{plugin}]",
                 f"run.out_dir={tmp_path / 'runs'}", "tracking.wandb.enabled=false", "rl.steps=1", "rl.eval_every=0",
                 "data.eval_sources.0.n_prompts=8", *overrides])


# ------------------------------------------------------------------ group filter
class PerCompletion:
    def __call__(self, scores, acc):
        return acc  # [B, G]: one flag per completion


def test_a_group_filter_must_return_one_flag_per_group():
    scores = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    with pytest.raises(ComponentError, match=rf"group_filter 'PerCompletion' \(.*{HERE}\) returned a tensor of "
                                             r"shape \(3, 2\) for scores of shape \(3, 2\)"):
        checked_keep(PerCompletion(), scores, scores > 0.5)
    assert checked_keep(lambda s, a: torch.tensor([1, 0, 1]), scores, scores > 0.5).tolist() == [True, False, True]
    with pytest.raises(ComponentError, match=r"values other than 0 and 1 \(such as \[0.5\]\)"):
        checked_keep(lambda s, a: torch.tensor([1.0, 0.5, 0.0]), scores, scores > 0.5)
    with pytest.raises(ComponentError, match="returned list"):
        checked_keep(lambda s, a: [True, False, True], scores, scores > 0.5)


def test_the_group_filter_probe_names_the_key_and_passes_the_shipped_filters():
    class Raises:
        def __call__(self, scores, acc):
            raise KeyError("metric")

    with pytest.raises(ConfigError, match=r"rl.group_filter: group_filter 'PerCompletion' .* shape \(3, 4\)"):
        probe_group_filter(PerCompletion(), "rl.group_filter")
    with pytest.raises(ConfigError, match=rf"rl.group_filter: group_filter 'Raises' .* failed on probe scores and "
                                          rf"acc of \[3, 4\]: KeyError: 'metric' \(.*{HERE}\)"):
        probe_group_filter(Raises(), "rl.group_filter")
    for name in shipped(GROUP_FILTER):
        probe_group_filter(GROUP_FILTER.build({"name": name}), "rl.group_filter")


PER_COMPLETION_FILTER = """
    from dataclasses import dataclass
    from klear_lab.registry import GROUP_FILTER

    @GROUP_FILTER.register("per_completion_test")
    @dataclass(frozen=True)
    class PerCompletion:
        def __call__(self, scores, acc):
            return acc
"""


@pytest.mark.usefixtures("registries_restored")
@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]])
def test_a_run_with_a_per_completion_group_filter_stops_before_the_model(tmp_path, capsys, dry_run):
    """It trained on the wrong groups, exit 0 (rl/trained_groups 256 of 16 prompts)."""
    assert train(tmp_path, PER_COMPLETION_FILTER, "rl.group_filter=per_completion_test", *dry_run) == 2
    err = capsys.readouterr().err
    assert "rl.group_filter: group_filter 'per_completion_test'" in err and "bad_component.py" in err, err
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------ aggregation
class PerToken:
    def __call__(self, loss, mask, ctx):
        return loss * mask


class Detached:
    def __call__(self, loss, mask, ctx):
        return (loss * mask).sum().detach()


class UnguardedMean:
    def __call__(self, loss, mask, ctx):
        return (loss * mask).sum() / ctx.num_tokens  # 0 / 0 on a micro-batch without positives


def test_an_aggregation_must_return_a_finite_scalar_with_a_gradient():
    with pytest.raises(ConfigError, match=rf"rl.aggregation: aggregation 'PerToken' \(.*{HERE}\) returned a tensor "
                                          r"of shape \(2, 3\) on a probe loss and mask of \[2, 3\]"):
        probe_aggregation(PerToken(), "rl.aggregation")
    with pytest.raises(ConfigError, match="'Detached' .* no gradient path to the loss"):
        probe_aggregation(Detached(), "rl.aggregation")
    with pytest.raises(ConfigError, match=r"'UnguardedMean' .* returned nan on an all-padding probe mask"):
        probe_aggregation(UnguardedMean(), "rl.aggregation")
    with pytest.raises(ConfigError, match="returned float"):
        probe_aggregation(lambda loss, mask, ctx: 1.0, "rl.aggregation")
    with torch.no_grad():  # a caller's no_grad does not make every mode look gradient-free
        for name in shipped(AGGREGATION):
            probe_aggregation(AGGREGATION.build({"name": name}), "rl.aggregation")


PER_TOKEN_AGGREGATION = """
    from dataclasses import dataclass
    from klear_lab.registry import AGGREGATION

    @AGGREGATION.register("per_token_test")
    @dataclass(frozen=True)
    class PerToken:
        def __call__(self, loss, mask, ctx):
            return loss * mask
"""


@pytest.mark.usefixtures("registries_restored")
def test_a_dry_run_with_a_non_scalar_aggregation_fails(tmp_path, capsys):
    """It passed ``--dry-run`` and failed in the first update ("grad can be implicitly created only for scalar
    outputs", exit 1)."""
    assert train(tmp_path, PER_TOKEN_AGGREGATION, "rl.aggregation=per_token_test", "--dry-run") == 2
    err = capsys.readouterr().err
    assert "rl.aggregation: aggregation 'per_token_test'" in err and "shape (2, 3)" in err, err


# ------------------------------------------------------------------ rollout engine
class NoStart:
    def check_available(self):
        pass


class StartWithoutTokenizer:
    def start(self, model):
        return None


def test_a_rollout_engine_must_be_startable():
    with pytest.raises(ConfigError, match=rf"rl.rollout: rollout 'NoStart' \(.*{HERE}\) has no start method; a "
                                          r"rollout engine has start\(model, tokenizer\) -> RolloutRuntime"):
        check_rollout_engine(NoStart(), "rl.rollout")
    with pytest.raises(ConfigError, match=r"'StartWithoutTokenizer' .* cannot be called as start\(model, tokenizer"):
        check_rollout_engine(StartWithoutTokenizer(), "rl.rollout")
    odd = StartWithoutTokenizer()
    odd.start, odd.check_available = (lambda model, tokenizer: None), True
    with pytest.raises(ConfigError, match="has a check_available that is not callable"):
        check_rollout_engine(odd, "rl.rollout")
    for name in shipped(ROLLOUT):
        check_rollout_engine(ROLLOUT.build({"name": name}), "rl.rollout")


NO_START_ENGINE = """
    from dataclasses import dataclass
    from klear_lab.registry import ROLLOUT

    @ROLLOUT.register("no_start_test")
    @dataclass(frozen=True)
    class NoStart:
        batch_size: int = 4
"""


@pytest.mark.usefixtures("registries_restored")
@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]])
def test_a_rollout_engine_without_start_is_refused_before_the_model(tmp_path, capsys, dry_run):
    """``--dry-run`` called it "ready"; the run loaded its model, then stopped with an AttributeError (exit 1)."""
    assert train(tmp_path, NO_START_ENGINE, "rl.rollout=no_start_test", *dry_run) == 2
    err = capsys.readouterr().err
    assert "rl.rollout: rollout 'no_start_test'" in err and "has no start method" in err, err
    assert not (tmp_path / "runs").exists()
