"""A checkpoint never gets ahead of ``metrics.csv``: a resume from it logs every step's row once.

Lightning logs a step's metrics after every callback's ``on_train_batch_end``, where the checkpoint is
written. Renamed into place there, a kill before the row was written left a checkpoint whose resume
started after that step: its row was never logged (``rl/grad_norm`` read steps 0, 1, 2, 4, ...).
"""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
import pytest

from klear_lab.config.compose import compose
from klear_lab.resume import checkpoint_log_step, checkpoint_path, resume_config
from klear_lab.run import run_experiment
from klear_lab.tracking import csv_rows

ROOT = Path(__file__).resolve().parents[2]
SFT = ROOT / "experiments/quickstart/sft.yaml"
RL = ROOT / "experiments/quickstart/rl.yaml"
SFT_OVERRIDES = ["data.sources.0.n_prompts=120", "sft.max_steps=7", "sft.tokens_per_micro_batch=1000",
                 "data.eval_sources.0.n_prompts=8", "eval.max_new_tokens=8", "eval.every_n_steps=3",
                 "trainer.checkpoint_every=2", "trainer.log_every_n_steps=1", "tracking.wandb.enabled=false"]
RL_OVERRIDES = ["model.init_from=null", "model.tiny.size=2m", "rl.steps=5", "rl.prompts_per_step=4",
                "rl.group_size=4", "rl.minibatch_prompts=2", "rl.max_new_tokens=8", "rl.eval_every=3",
                "rl.group_filter=none", "data.sources.0.n_prompts=40", "data.eval_sources.0.n_prompts=8",
                "eval.max_new_tokens=8", "trainer.checkpoint_every=2", "trainer.log_every_n_steps=1",
                "tracking.wandb.enabled=false"]


class RowsBeforeCheckpoint(L.Callback):
    """After the checkpoint callback's hooks (it comes first): wherever ``last.ckpt`` is in place, the row of
    the step it was written at is in ``metrics.csv``."""

    def __init__(self, key: str) -> None:
        self.key, self.looked = key, 0

    def _look(self, trainer: L.Trainer) -> None:
        run_dir = Path(trainer.default_root_dir)
        ckpt = checkpoint_path(run_dir)
        if ckpt.is_file():
            step = checkpoint_log_step(ckpt)
            logged = [int(r["step"]) for r in csv_rows(run_dir / "csv" / "metrics.csv") if r.get(self.key)]
            assert step in logged, f"last.ckpt (step {step}) is in place before its row: {self.key} at {logged}"
            self.looked += 1

    def on_train_batch_start(self, trainer, *args) -> None:
        self._look(trainer)

    def on_train_batch_end(self, trainer, *args) -> None:
        self._look(trainer)

    def on_validation_end(self, trainer, *args) -> None:
        self._look(trainer)

    def on_train_end(self, trainer, *args) -> None:
        self._look(trainer)


@pytest.mark.parametrize(("experiment", "overrides", "key"), [(SFT, SFT_OVERRIDES, "train/loss"),
                                                              (RL, RL_OVERRIDES, "rl/grad_norm")], ids=["sft", "rl"])
def test_a_checkpoint_is_in_place_only_after_its_steps_row(tmp_path, experiment, overrides, key):
    probe = RowsBeforeCheckpoint(key)
    result = run_experiment(compose(experiment, [f"run.out_dir={tmp_path}", *overrides]), callbacks=[probe])
    assert probe.looked >= 3  # the checkpoints of steps 2 and 4 were looked at, each more than once
    assert checkpoint_path(result.run_dir).is_file()
    assert not list((result.run_dir / "checkpoints").glob(".*.tmp"))  # the last one written is in place


class CrashAtStep(L.Callback):
    """Raise at the end of optimizer step ``at``: after the checkpoint written there, before Lightning logs
    the step (a kill in that window)."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.global_step == self.at:
            raise RuntimeError("simulated crash")


def _failing_row(monkeypatch, step: int) -> None:
    """Make the CSV logger raise on the row of ``step`` (Lightning's 0-based logging index): a full disk, say,
    after Lightning counted the batch completed and before the row was written."""
    from klear_lab.csv_log import KeepingCSVLogger

    log = KeepingCSVLogger.log_metrics

    def failing(self, metrics, step=None, _at=step):  # Lightning passes both by keyword
        if step == _at and "train/loss" in metrics:
            raise RuntimeError("simulated crash")
        return log(self, metrics=metrics, step=step)

    monkeypatch.setattr(KeepingCSVLogger, "log_metrics", failing)


@pytest.mark.parametrize("where", ["callback", "logger"])
def test_a_crash_between_a_checkpoint_and_its_row_resumes_from_the_one_before(tmp_path, monkeypatch, where):
    cfg = compose(SFT, [f"run.out_dir={tmp_path / 'whole'}", *SFT_OVERRIDES])
    whole = run_experiment(cfg)
    with monkeypatch.context() as patch, pytest.raises(RuntimeError, match="simulated crash"):
        if where == "logger":
            _failing_row(patch, 3)  # step 4's row
        run_experiment(compose(SFT, [f"run.out_dir={tmp_path / 'crashed'}", *SFT_OVERRIDES]),
                       callbacks=[CrashAtStep(4)] if where == "callback" else [])
    (run_dir,) = [p for p in (tmp_path / "crashed").iterdir() if not p.name.startswith(".")]
    assert checkpoint_log_step(checkpoint_path(run_dir)) == 1  # step 2's (logged at index 1), not step 4's
    assert not list((run_dir / "checkpoints").glob(".*.tmp"))
    run_experiment(resume_config(run_dir), resume=run_dir)

    def losses(d: Path) -> list[tuple[int, str]]:
        return [(int(r["step"]), r["train/loss"]) for r in csv_rows(d / "csv" / "metrics.csv") if r.get("train/loss")]

    assert [s for s, _ in losses(run_dir)] == list(range(7))
    assert losses(run_dir) == losses(whole.run_dir)
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"
