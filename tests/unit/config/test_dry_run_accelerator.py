"""``--dry-run`` with ``trainer.accelerator=gpu`` (or ``cuda``) on a machine without one: the plan passed in
silence (exit 0, "gpu"), while the run stops ("No supported gpu backend found!"; eval: "no CUDA device is
visible"). The accelerator row says NOT AVAILABLE HERE now, still exit 0: the config may be meant for a GPU box."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from klear_lab.cli import main
from klear_lab.config.compose import compose
from klear_lab.dry_run import NOT_HERE, plan_rows, unsupported

ROOT = Path(__file__).resolve().parents[3]
SFT = ROOT / "experiments/quickstart/sft.yaml"
MATH = ROOT / "experiments/paper/rl/math.yaml"  # Qwen3-8B: its plan is built on the meta device
TRAIN_ROW = "accelerator / devices / strategy / precision"
WOULD_STOP = f"({NOT_HERE}: no CUDA device is visible here: the run would stop)"


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def eval_cfg(accelerator: str) -> dict:
    cfg = compose(MATH, [f"trainer.accelerator={accelerator}"])
    cfg["run"]["kind"] = "eval"
    return cfg


@pytest.mark.parametrize("accelerator", ["gpu", "cuda"])
def test_a_gpu_accelerator_without_one_is_not_available_here(no_gpu, accelerator):
    rows = plan_rows(compose(SFT, [f"trainer.accelerator={accelerator}"]), 1_000_000)
    assert dict(rows)[TRAIN_ROW] == f"{accelerator} / 1 / auto / 32-true {WOULD_STOP}"
    assert not unsupported(rows)  # not a config problem: exit 0
    eval_rows = plan_rows(eval_cfg(accelerator), 8_190_735_360)
    assert dict(eval_rows)["accelerator"] == f"{accelerator} {WOULD_STOP}"
    assert not unsupported(eval_rows)


@pytest.mark.parametrize("accelerator", ["auto", "cpu"])
def test_auto_and_cpu_run_without_a_gpu(no_gpu, accelerator):
    """``auto`` falls back to the CPU, as the run does."""
    assert dict(plan_rows(compose(SFT, [f"trainer.accelerator={accelerator}"]), 1_000_000))[TRAIN_ROW] \
        == f"{accelerator} / 1 / auto / 32-true"
    assert dict(plan_rows(eval_cfg(accelerator), 8_190_735_360))["accelerator"] == accelerator


def test_a_visible_gpu_leaves_the_row_as_it_was(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    rows = plan_rows(compose(SFT, ["trainer.accelerator=gpu"]), 1_000_000)
    assert dict(rows)[TRAIN_ROW] == "gpu / 1 / auto / 32-true"
    assert dict(plan_rows(eval_cfg("cuda"), 8_190_735_360))["accelerator"] == "cuda"


def test_train_and_eval_dry_runs_say_it_and_exit_0(no_gpu, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # the row whole on one line
    assert main(["train", str(SFT), "trainer.accelerator=gpu", "--dry-run"]) == 0
    assert WOULD_STOP in capsys.readouterr().out
    assert main(["eval", str(MATH), "trainer.accelerator=cuda", "--dry-run"]) == 0
    assert WOULD_STOP in capsys.readouterr().out
