"""Sequences longer than the model's positions: a warning naming the key, except under rotary scaling."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
from transformers import Qwen2Config

from klear_lab.build_model import longest_sequence, warn_positions
from klear_lab.config.compose import compose

EXPERIMENTS = Path(__file__).resolve().parents[3] / "experiments"


def test_the_longest_sequence_is_named_by_the_key_that_bounds_it():
    sft = compose(EXPERIMENTS / "quickstart/sft.yaml", ["data.max_length=900", "eval.max_new_tokens=200"])
    assert longest_sequence(sft) == ("data.max_length", 900)
    rl = compose(EXPERIMENTS / "quickstart/rl.yaml", ["rl.max_prompt_tokens=300", "rl.max_new_tokens=500"])
    assert longest_sequence(rl) == ("rl.max_prompt_tokens + rl.max_new_tokens", 800)


def test_a_run_past_the_models_positions_warns_with_the_key():
    cfg = compose(EXPERIMENTS / "quickstart/sft.yaml", ["data.max_length=2000", "sft.tokens_per_micro_batch=2000"])
    with pytest.warns(UserWarning, match=r"data.max_length = 2000 tokens exceeds the model's "
                                         r"max_position_embeddings \(1024\)"):
        warn_positions(cfg, Qwen2Config(max_position_embeddings=1024))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_positions(cfg, Qwen2Config(max_position_embeddings=4096))  # room: silent
        warn_positions(cfg, Qwen2Config(max_position_embeddings=1024,  # YaRN chosen on purpose: silent
                                        rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                      "original_max_position_embeddings": 1024}))


@pytest.mark.parametrize("experiment", sorted(str(p.relative_to(EXPERIMENTS)) for p in EXPERIMENTS.rglob("*.yaml")))
def test_no_shipped_experiment_outgrows_its_model(experiment):
    """The paper configs' Qwen3-8B has 40,960 positions (prompt 4K + response 32K fits); the tiny models
    1,024 unless set."""
    from klear_lab.dry_run import model_config

    cfg = compose(EXPERIMENTS / experiment)
    limit = model_config(cfg).max_position_embeddings
    assert limit >= (40960 if "paper" in experiment else 1024)
    assert longest_sequence(cfg)[1] <= limit
