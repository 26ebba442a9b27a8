"""Each held-out verifier must grade its own task: ``eval.reward=code`` marked every right math answer wrong, and
``val/acc`` read 0 with no error (only ``rl.reward`` was checked against the tasks it scores)."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

from klear_lab.config.compose import compose
from klear_lab.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("override", "message"), [
    ("eval.reward=code", "eval.reward grades the held-out math records, but 'code' scores code tasks: choose a "
                         "reward of math tasks (math_verify)"),
    ("eval.code_reward=math_verify", "eval.code_reward grades the held-out code records, but 'math_verify' "
                                     "scores math tasks: choose a reward of code tasks (code)"),
])
@pytest.mark.parametrize("experiment", ["sft.yaml", "rl.yaml"])
def test_a_held_out_grader_of_another_task_is_refused_at_compose(experiment, override, message):
    with pytest.raises(ConfigError) as err:
        compose(ROOT / "experiments/quickstart" / experiment, [override])
    assert message in str(err.value)


def test_the_refusal_names_the_experiment_file_that_set_it(tmp_path):
    exp = tmp_path / "e.yaml"
    exp.write_text(f"base: {ROOT / 'experiments/quickstart/sft.yaml'}\neval: {{reward: {{name: code}}}}\n")
    refused = r"^eval.reward grades the held-out math .*\(eval.reward.name from .*e.yaml\)$"
    with pytest.raises(ConfigError, match=refused):
        compose(exp)


def test_the_graders_of_their_own_tasks_compose():
    cfg = compose(ROOT / "experiments/paper/rl/code.yaml", ["eval.code_reward.max_tests=4"])
    assert (cfg["eval"]["reward"]["name"], cfg["eval"]["code_reward"]["name"]) == ("math_verify", "code")
