"""RL scores every prompt with one reward: it must be a reward for the prompts' task."""

from __future__ import annotations

from pathlib import Path

import pytest

from klear_lab.data.records import Record
from klear_lab.errors import ConfigError
from klear_lab.stages.rl import check_reward_tasks

ROOT = Path(__file__).resolve().parents[3]


def _record(task: str, i: int = 0) -> Record:
    return Record(f"{task}/{i}", "s", task, "p", "a")


def test_a_math_reward_refuses_code_prompts():
    """It graded a code record by the reference program's text and ran nothing."""
    with pytest.raises(ConfigError) as err:
        check_reward_tasks("math_verify", [_record("math"), _record("code"), _record("code", 1)])
    assert "rl.reward 'math_verify' scores math tasks" in str(err.value) and "2 code record(s) of 3" in str(err.value)
    with pytest.raises(ConfigError, match="rl.reward 'code' scores code tasks"):
        check_reward_tasks("code", [_record("math")])
    check_reward_tasks("code", [_record("code")])


@pytest.mark.parametrize("experiment", ["quickstart/rl.yaml", "quickstart/code_rl.yaml"])
def test_shipped_rl_experiments_pair_reward_and_task(experiment):
    from klear_lab.builders import build_train_records
    from klear_lab.config.compose import compose

    cfg = compose(ROOT / "experiments" / experiment)
    records, _ = build_train_records(cfg)
    check_reward_tasks(cfg["rl"]["reward"]["name"], records)
    with pytest.raises(ConfigError):
        check_reward_tasks("code" if cfg["rl"]["reward"]["name"] != "code" else "math_verify", records)
