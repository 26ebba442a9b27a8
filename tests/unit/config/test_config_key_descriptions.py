"""Every key ``klear-lab config --keys`` lists says what it means: 29 of 156 printed an empty description
(rl.overlong_buffer, optim.warmup_steps, trainer.checkpoint, tracking.wandb.*...)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

from klear_lab.cli import main
from klear_lab.config.compose import compose
from klear_lab.config.describe import field_docs, key_rows
from klear_lab.registry import REGISTRIES

QUICKSTART = Path(__file__).resolve().parents[3] / "experiments/quickstart"


@pytest.mark.parametrize("experiment", ["sft.yaml", "rl.yaml", "code_rl.yaml"])
def test_every_listed_key_has_a_description(experiment):
    """The rows ``config --keys`` prints (``key_rows`` of the composed experiment), components' parameters too."""
    rows = key_rows(compose(str(QUICKSTART / experiment)))
    assert len(rows) > 100
    assert [key for key, _, described in rows if not described.strip()] == []


def test_every_registered_component_parameter_has_a_description():
    """An experiment may pick any component: each one's parameters show under ``config --keys`` too. The built-in
    ones: components other tests registered in this process (pytest-xdist runs files in any order in one worker)
    are theirs."""
    compose(str(QUICKSTART / "rl.yaml"))  # loads the built-in components
    missing = []
    for axis, registry in REGISTRIES.items():
        for name in registry.names():
            cls = registry.get(name)
            if not cls.__module__.startswith("klear_lab."):
                continue
            docs = field_docs(cls)
            missing += [f"{axis} {name}.{f.name}" for f in dataclasses.fields(cls) if f.name not in docs]
    assert missing == []


def test_keys_table_says_what_zero_means_and_the_warmup_unit(capsys, monkeypatch):
    """The keys the review named, as the command prints them."""
    monkeypatch.setenv("COLUMNS", "400")  # no cell wraps
    assert main(["config", str(QUICKSTART / "rl.yaml"), "--keys", "rl"]) == 0
    out = capsys.readouterr().out
    eval_every = next(line for line in out.splitlines() if "│ rl.eval_every " in line)
    assert "0 = before the first and after the last only" in eval_every
    assert main(["config", str(QUICKSTART / "rl.yaml"), "--keys", "optim.warmup_steps"]) == 0
    assert "rl.lr_schedule_unit" in capsys.readouterr().out
