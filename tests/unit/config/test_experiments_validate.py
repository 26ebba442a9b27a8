"""Every YAML under experiments/ composes and validates; paper-scale ones pass --dry-run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from klear_lab.config.compose import compose

ROOT = Path(__file__).resolve().parents[3]
EXPERIMENTS = sorted((ROOT / "experiments").rglob("*.yaml"))


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_experiment_composes(path):
    cfg = compose(path)
    assert cfg["run"]["kind"] in ("sft", "rl")


@pytest.mark.parametrize("path", [p for p in EXPERIMENTS if "paper" in p.parts], ids=lambda p: str(p.relative_to(ROOT)))
def test_paper_configs_dry_run(path):
    from klear_lab.dry_run import dry_run

    rows = dict(dry_run(compose(path)))
    assert "8,190.7 M" in rows["parameters"]  # Qwen3-8B architecture on the meta device


def test_dry_run_prints_bracketed_values_verbatim(capsys):
    """Rich markup must not eat ``[vllm]`` in "pip install 'klear-lab[vllm]'" (a tag to Rich)."""
    from klear_lab.dry_run import dry_run

    rows = dict(dry_run(compose(ROOT / "experiments/paper/rl/math.yaml", ["rl.rollout=vllm"])))
    out = capsys.readouterr().out
    brackets = [t for v in rows.values() for t in re.findall(r"\[[a-z][^\]]*\]", v)]
    assert all(t in out for t in brackets), (brackets, out)
    assert max(len(line) for line in out.splitlines()) > 80  # a pipe gets the wide log console, not 80 columns


def test_train_overrides_may_follow_the_options(capsys):
    from klear_lab.cli import main

    exp = str(ROOT / "experiments/paper/rl/math.yaml")
    assert main(["train", exp, "--dry-run", "rl.clip=cispo", "rl.steps=7"]) == 0
    out = capsys.readouterr().out
    assert "cispo" in out and "gppo" not in out
    assert main(["train", exp, "--dry-run", "rl.nope=1"]) == 2
    assert "rl.nope" in capsys.readouterr().err
