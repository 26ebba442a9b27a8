"""A rollout step whose groups were all dropped logs no update: its row had the previous update's values.

Lightning sends an on-step metric's last value again at each later step of the epoch (an RL run is one),
so under the zero-variance filter a step that trained nothing read like the update before it:
``rl/grad_norm``, ``train/loss``, ``rl/entropy`` and ``perf/time_update_s`` repeated, and
``rl/updates_per_step`` said 1.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from klear_lab.config.compose import compose
from klear_lab.run import run_experiment
from klear_lab.tracking import csv_rows

ROOT = Path(__file__).resolve().parents[2]

PLUGIN = '''
from dataclasses import dataclass

import torch

from klear_lab.registry import GROUP_FILTER

CALLS = [0]


@GROUP_FILTER.register("test_keep_first_step_only")
@dataclass(frozen=True)
class KeepFirstStepOnly:
    """Test filter: keeps every group at the first rollout step, none after (its first call is the check of
    its output before the run, on tiny scores)."""

    def __call__(self, scores, acc):
        CALLS[0] += 1
        return torch.full((scores.shape[0],), CALLS[0] <= 2, dtype=torch.bool)
'''


def test_a_step_without_an_update_does_not_repeat_the_last_updates_metrics(tmp_path):
    plugin = tmp_path / "keep_first_step_only.py"
    plugin.write_text(PLUGIN)
    cfg = compose(ROOT / "experiments/quickstart/rl.yaml", [
        f"run.out_dir={tmp_path / 'runs'}", f"plugins=[{plugin}]", "rl.group_filter=test_keep_first_step_only",
        "model.init_from=null", "model.tiny.size=2m", "rl.steps=3", "rl.prompts_per_step=4", "rl.group_size=4",
        "rl.minibatch_prompts=2", "rl.max_new_tokens=8", "rl.eval_every=0", "data.sources.0.n_prompts=20",
        "data.eval_sources.0.n_prompts=4", "eval.max_new_tokens=8", "trainer.checkpoint=false",
        "trainer.log_every_n_steps=1", "tracking.wandb.enabled=false"])
    result = run_experiment(cfg)
    rows = [r for r in csv_rows(result.run_dir / "csv" / "metrics.csv") if r.get("rl/trained_groups")]

    assert [float(r["rl/trained_groups"]) for r in rows] == [4.0, 0.0, 0.0]
    assert [float(r["rl/updates_per_step"]) for r in rows] == [2.0, 0.0, 0.0]
    for key in ("rl/grad_norm", "train/loss", "rl/entropy", "perf/time_update_s", "perf/time_logprob_s"):
        assert rows[0][key] != "" and [r[key] for r in rows[1:]] == ["", ""], key
    for key in ("reward/mean", "perf/time_generate_s", "perf/step_s"):  # what every step measures
        assert all(r[key] != "" for r in rows), key
    # the summary holds each metric's last logged value, as a sweep table reads the CSV's last value
    assert result.metrics["rl/updates_per_step"] == 0.0
    assert result.metrics["rl/grad_norm"] == pytest.approx(float(rows[0]["rl/grad_norm"]))
