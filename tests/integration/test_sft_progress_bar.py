"""The SFT progress bar counts epochs against the plan; Lightning's own bar said "Epoch 0/-2" (max_epochs -1)."""

from __future__ import annotations

from pathlib import Path

import lightning as L
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
    labels = Labels()
    cfg = compose(QUICKSTART, [*tiny_sft_overrides, "data.sources.0.n_prompts=20", "sft.max_steps=0",
                               "sft.epochs=1.5"])
    result = run_experiment(cfg, callbacks=[labels])
    assert result.metrics["plan/steps_per_epoch"] == 2 and result.metrics["plan/total_steps"] == 3
    assert result.metrics["train/steps"] == 3  # the Trainer's limits are untouched
    assert labels.seen == ["Epoch 0/1", "Epoch 0/1", "Epoch 1/1"]
