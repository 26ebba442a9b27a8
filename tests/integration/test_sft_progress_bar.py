"""The SFT progress bar counts epochs against the plan; Lightning's own bar said "Epoch 0/-2" (max_epochs -1)."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
from lightning.pytorch.callbacks import RichProgressBar

from klear_lab.config.compose import compose
from klear_lab.run import run_experiment

QUICKSTART = Path(__file__).resolve().parents[2] / "experiments/quickstart/sft.yaml"


class Labels(L.Callback):
    """The progress bar's epoch label at every training batch."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def on_train_batch_end(self, trainer: L.Trainer, *args) -> None:
        (bar,) = [c for c in trainer.callbacks if isinstance(c, RichProgressBar)]
        self.seen.append(bar._get_train_description(trainer.current_epoch).strip())


def test_the_bar_counts_the_planned_epochs_and_the_steps_stay(tiny_sft_overrides):
    """20 examples, 10 a batch: 2 steps an epoch; sft.epochs=1.5 is 3 steps, into a second epoch."""
    labels, counts = Labels(), Counts()
    cfg = compose(QUICKSTART, [*tiny_sft_overrides, "data.sources.0.n_prompts=20", "sft.max_steps=0",
                               "sft.epochs=1.5"])
    result = run_experiment(cfg, callbacks=[labels, counts])
    assert counts.seen == [(1, 2), (2, 2), (1, 1)]  # the last epoch's 1 batch to max_steps (a review: 1/2)
    assert result.metrics["plan/steps_per_epoch"] == 2 and result.metrics["plan/total_steps"] == 3
    assert result.metrics["train/steps"] == 3  # the Trainer's limits are untouched
    assert labels.seen == ["Epoch 0/1", "Epoch 0/1", "Epoch 1/1"]


class Counts(L.Callback):
    """(completed, total) of the bar's training task at every training batch."""

    def __init__(self, crash_at: int | None = None) -> None:
        self.seen: list[tuple[float, float]] = []
        self.crash_at = crash_at

    def on_train_batch_end(self, trainer: L.Trainer, *args) -> None:
        (bar,) = [c for c in trainer.callbacks if isinstance(c, RichProgressBar)]
        task = bar.progress.tasks[bar.train_progress_bar_id]
        self.seen.append((task.completed, task.total))
        if trainer.global_step == self.crash_at:
            raise RuntimeError("simulated crash")


def test_a_resumed_run_and_gradient_accumulation_count_batches_against_their_own_total(tmp_path, tiny_sft_overrides):
    """After a resume at step 5 of 10 the bar read 10/5: its count went on from the restored batch, its
    total was the remaining steps (a new-user walkthrough); under accumulation steps were read as batches."""
    from klear_lab.resume import resume_config

    overrides = [*tiny_sft_overrides, "data.sources.0.n_prompts=200", "sft.max_steps=10", "trainer.checkpoint=true",
                 "trainer.checkpoint_every=2"]
    first, resumed = Counts(crash_at=5), Counts()
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_experiment(compose(QUICKSTART, overrides), callbacks=[first])
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]
    run_experiment(resume_config(run_dir), resume=run_dir, callbacks=[resumed])
    assert first.seen[-1] == (5, 10) and resumed.seen[0] == (5, 10) and resumed.seen[-1] == (10, 10)
    accumulated = Counts()
    cfg = compose(QUICKSTART, [*tiny_sft_overrides, "data.sources.0.n_prompts=200", "sft.max_steps=3",
                               "sft.grad_accum=2", f"run.out_dir={tmp_path / 'acc'}"])
    run_experiment(cfg, callbacks=[accumulated])
    assert accumulated.seen[-1] == (6, 6)  # 3 steps of 2 batches
