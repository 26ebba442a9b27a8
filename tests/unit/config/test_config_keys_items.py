"""``klear-lab config --keys`` of a key inside a list of components, as overrides name it."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

from klear_lab.cli import main

RL = str(Path(__file__).resolve().parents[3] / "experiments/quickstart/rl.yaml")


@pytest.fixture(autouse=True)
def wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # no cell wraps


def test_keys_of_a_component_list_item_are_listed_as_overrides_name_them(capsys):
    """``--keys data.eval_sources.0.n_prompts`` said "no config key", though the override sets it (the
    quickstart sweep does), and ``--keys data.sources`` showed the names only."""
    assert main(["config", RL, "--keys", "data.eval_sources.0.n_prompts"]) == 0
    assert "│ data.eval_sources.0.n_prompts │ 500 " in capsys.readouterr().out
    assert main(["config", RL, "data.sources.0.n_prompts=77", "--keys",
                 "data.sources"]) == 0
    out = capsys.readouterr().out
    assert "│ data.sources.0 " in out and "item 0 of data.sources: a source component" in out
    assert "│ data.sources.0.n_prompts " in out and "│ 77 " in out
    assert main(["config", RL, "--keys", "data.sources.1"]) == 2  # one source only
    assert "no config key at or under 'data.sources.1'" in capsys.readouterr().err
