"""What SFT's timing metrics count: perf/tokens_per_s the training steps only, perf/train_seconds fit's whole
time (as RL's), perf/eval_seconds the evaluations.

The real checkpoint write and the real evaluation are made slower by a known sleep; the assertions are on
which total holds those seconds, not on any speed."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from klear_lab import checkpointing
from klear_lab.config.compose import compose
from klear_lab.modules import sft as sft_module
from klear_lab.run import run_experiment

QUICKSTART = Path(__file__).resolve().parents[2] / "experiments/quickstart/sft.yaml"
CKPT_SLEEP, EVAL_SLEEP, LOSS_SLEEP = 1.0, 0.5, 0.1


@pytest.fixture
def slowed_calls(monkeypatch) -> dict[str, list[float]]:
    """The real ``save_beside``, ``evaluate_sharded`` and a micro-batch's loss, each after a sleep; the seconds
    of each call."""
    seconds: dict[str, list[float]] = {"checkpoints": [], "evaluations": [], "losses": []}

    def slowed(real, sleep: float, key: str):
        def call(*args, **kwargs):
            start = time.perf_counter()
            time.sleep(sleep)
            try:
                return real(*args, **kwargs)
            finally:
                seconds[key].append(time.perf_counter() - start)
        return call

    monkeypatch.setattr(checkpointing, "save_beside", slowed(checkpointing.save_beside, CKPT_SLEEP, "checkpoints"))
    monkeypatch.setattr(sft_module, "evaluate_sharded",
                        slowed(sft_module.evaluate_sharded, EVAL_SLEEP, "evaluations"))
    monkeypatch.setattr(sft_module, "masked_token_ce", slowed(sft_module.masked_token_ce, LOSS_SLEEP, "losses"))
    return seconds


def test_timing_leaves_checkpoints_out_of_tokens_per_s_and_eval_seconds(tiny_sft_overrides,
                                                                        slowed_calls):
    """5 steps of 2 micro-batches; evaluations after steps 2 and 4 (inside fit) and after fit; checkpoints after
    steps 1 and 3 (at the step's end: ResumeCheckpoint.on_train_batch_end, before the module's) and 2 and 4
    (after the evaluation: on_validation_end). tokens_per_s counted the checkpoints at a step's end as
    training time, not those after an evaluation; SFT had no perf/eval_seconds."""
    cfg = compose(QUICKSTART, [*tiny_sft_overrides, "sft.max_steps=5", "eval.every_n_steps=2",
                               "trainer.checkpoint=true", "trainer.checkpoint_every=1", "optim.warmup_steps=0",
                               "sft.tokens_per_micro_batch=200", "sft.grad_accum=2", "data.eval_sources.0.n_prompts=2",
                               "eval.max_new_tokens=4"])
    result = run_experiment(cfg)
    summary = json.loads((result.run_dir / "summary.json").read_text())
    seconds = slowed_calls
    assert (len(seconds["checkpoints"]), len(seconds["evaluations"])) == (4, 3)  # the final step's: none
    assert len(seconds["losses"]) == 10

    trained_s = summary["train/tokens"] / summary["perf/tokens_per_s"]  # the seconds tokens_per_s divides by
    in_fit = sum(seconds["checkpoints"]) + sum(seconds["evaluations"][:2])
    assert summary["perf/train_seconds"] >= in_fit  # fit's wall time: all of it (as RL's)
    assert summary["perf/train_seconds"] - trained_s >= in_fit  # none of it is training time
    assert trained_s >= sum(seconds["losses"])  # every micro-batch is, not only a step's last

    evaluated = sum(seconds["evaluations"])  # the final one, after fit, too
    assert evaluated <= summary["perf/eval_seconds"] < evaluated + CKPT_SLEEP  # not the checkpoints after two
