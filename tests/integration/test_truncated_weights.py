"""A model directory whose weights file was cut short (an interrupted copy, a full disk): safetensors' error named
no file and ended the run with a traceback (exit 1); it is a ConfigError naming the file and directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from klear_lab.build_model import build_tokenizer_and_model
from klear_lab.config.compose import compose
from klear_lab.errors import ConfigError
from klear_lab.stages.common import save_model

SFT = Path(__file__).resolve().parents[2] / "experiments/quickstart/sft.yaml"


def test_a_truncated_safetensors_file_is_named(tmp_path):
    cfg = compose(SFT, ["model.tiny.size=2m"])
    tokenizer, model = build_tokenizer_and_model(cfg, ["1+2=3", "4+5=9", "answer \\boxed{7}"] * 50)
    save_model(model, tokenizer, tmp_path / "ckpt")
    weights = tmp_path / "ckpt" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:4096])
    cfg = compose(SFT, [f"model.name_or_path={tmp_path / 'ckpt'}"])
    with pytest.raises(ConfigError, match=r"its weights \(model.safetensors in .*ckpt\) cannot be read: .*cut short"):
        build_tokenizer_and_model(cfg, [])
