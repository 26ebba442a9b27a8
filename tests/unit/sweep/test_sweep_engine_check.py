"""A sweep refuses, before any trial, a rollout engine its trials would refuse as they start (a plugin engine without
``start``: ``train --dry-run`` says NOT SUPPORTED), for an RL run's ``rl.rollout`` and for an SFT run's
``eval.engine: rollout``, in the run's words and naming the axis value that chose it. ``--validate-only`` said OK of
the SFT one (it collected only the engines NOT AVAILABLE HERE) and each trial failed at its start."""

from __future__ import annotations

import pytest
import yaml
from sweep_fixtures import write_spec

from klear_lab.cli_sweep import main

pytestmark = pytest.mark.usefixtures("registries_restored")

ENGINES = """
from dataclasses import dataclass
from klear_lab.registry import ROLLOUT


class Runtime:
    def generate(self, *args, **kwargs):
        raise AssertionError("not started by the checks")

    def sync_weights(self, model):
        pass

    def close(self):
        pass


@ROLLOUT.register("sweep_check_no_start")
@dataclass(frozen=True)
class NoStart:
    \"\"\"Test plugin: no start(model, tokenizer).\"\"\"

    batch_size: int = 4


@ROLLOUT.register("sweep_check_good")
@dataclass(frozen=True)
class Good:
    batch_size: int = 4

    def start(self, model, tokenizer):
        return Runtime()
"""
BROKEN = "rollout 'sweep_check_no_start' ("
NO_START = "has no start method; a rollout engine has start(model, tokenizer)"
EVAL_KEY = "rl.rollout (eval.engine: rollout): "


def _spec(tmp_path, kind: str, axes: dict, engine: str | None = None) -> str:
    """A grid spec over ``axes`` on a tiny ``kind`` experiment loading the engines' plugin (SFT: evaluating with
    ``eval.engine: rollout``), its engine ``engine``."""
    (tmp_path / "engines.py").write_text(ENGINES)
    path = write_spec(tmp_path, axes=axes, metrics=["val/acc"])
    exp = {"run": {"name": "toy", "kind": kind}, "plugins": [str(tmp_path / "engines.py")]}
    if kind == "sft":
        exp["eval"] = {"engine": "rollout"}
    if engine:
        exp["rl"] = {"rollout": {"name": engine}}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(exp))
    return str(path)


def _refused(argv: list[str], capsys) -> str:
    assert main(argv) == 2, capsys.readouterr()
    return capsys.readouterr().err


@pytest.mark.parametrize(("kind", "key"), [("rl", "rl.rollout: "), ("sft", EVAL_KEY)])
def test_a_base_engine_without_start_is_refused_by_validate_only_and_the_run(tmp_path, capsys, kind, key):
    spec = _spec(tmp_path, kind, {"optim.lr": [0.001, 0.002]}, engine="sweep_check_no_start")
    said = _refused(["sweep", spec, "--validate-only"], capsys)
    assert f"base experiment: every trial would stop before training: {key}{BROKEN}" in said, said
    assert NO_START in said, said
    assert _refused(["sweep", spec], capsys) == said  # the run: before its study or any trial
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("kind", "key"), [("rl", "rl.rollout: "), ("sft", EVAL_KEY)])
def test_an_axis_value_with_an_engine_without_start_is_named(tmp_path, capsys, kind, key):
    spec = _spec(tmp_path, kind, {"rl.rollout.name": ["sweep_check_good", "sweep_check_no_start"]})
    said = _refused(["sweep", spec, "--validate-only"], capsys)
    assert f"axes.rl.rollout.name: value 'sweep_check_no_start': {key}{BROKEN}" in said, said


def test_an_engine_with_start_is_ok(tmp_path, capsys):
    spec = _spec(tmp_path, "sft", {"optim.lr": [0.001, 0.002]}, engine="sweep_check_good")
    assert main(["sweep", spec, "--validate-only"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert ": OK: 2 arm(s)" in out and "rollout engines" not in out, out
