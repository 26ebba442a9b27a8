"""What the run refuses as it starts, asked by ``train --dry-run`` and ``sweep --validate-only`` too: an unknown
``model.attn_implementation`` and trainer settings Lightning refuses here passed the dry run (exit 0), and the
attention name passed the sweep's validation, whose trials then failed (found by a new-user walkthrough)."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

from klear_lab.cli import main
from klear_lab.runnable import attention_problem

ROOT = Path(__file__).resolve().parents[3]
SFT = str(ROOT / "experiments/quickstart/sft.yaml")


@pytest.mark.parametrize("override, said", [
    ("model.attn_implementation=nosuch", "model.attn_implementation 'nosuch': transformers knows no such attention"),
    # on the CPU by name: with `auto`, a machine with a GPU would train with both
    ("trainer.accelerator=cpu trainer.devices=-1", "trainer.devices=-1 trainer.strategy='auto' trainer.precision="
                                                   "'32-true': Lightning cannot"),
    ("trainer.accelerator=cpu trainer.strategy=fsdp", "The strategy `fsdp` requires a GPU accelerator"),
], ids=["attention", "devices", "fsdp_on_cpu"])
def test_the_dry_run_refuses_what_the_run_refuses(override, said, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", SFT, *override.split(), "--dry-run"]) == 2
    assert said in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_known_attentions_and_hub_kernels_pass():
    for name in ("eager", "sdpa", "flash_attention_2", "flex_attention", "paged|eager", "kernels-community/flash-attn"):
        assert attention_problem(name) is None, name
    assert "known: eager, flash_attention_2" in attention_problem("flash_attention")


def test_a_gpu_trainer_still_passes_the_dry_run_here(tmp_path, monkeypatch):
    """The paper-scale configs name their accelerator: checked on a laptop, run on a cluster."""
    monkeypatch.chdir(tmp_path)
    assert main(["train", str(ROOT / "experiments/paper/sft/final.yaml"), "--dry-run"]) == 0

