"""The SFT stage: build data, model and Lightning objects from a config, then train and evaluate."""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import LearningRateMonitor, RichProgressBar

from klear_lab import builders
from klear_lab.build_model import build_tokenizer_and_model
from klear_lab.checkpointing import optimizer_steps, resume_callback
from klear_lab.data.datamodule import SFTDataModule
from klear_lab.data.overlap import warn_trained_heldout
from klear_lab.data.records import data_digests, first_read
from klear_lab.data.sft import tokenize_records
from klear_lab.errors import DataError
from klear_lab.loggers import make_loggers
from klear_lab.modules.sft import SFTModule
from klear_lab.rl.rollout.checks import check_fits
from klear_lab.stages.common import (
    check_trainer,
    check_wandb_login,
    finish_loggers,
    log_samples_table,
    make_trainer,
    save_model,
    write_samples,
)
from klear_lab.stages.sft_steps import many_epochs_problem, rows_per_micro_batch


@dataclass
class SFTStage:
    cfg: dict[str, Any]
    module: SFTModule
    datamodule: SFTDataModule
    plan: dict[str, float]
    data: dict[str, str] = field(default_factory=dict)  # records_digest of the train and eval records

    def close(self) -> None:
        """Stop what ``prepare_sft`` started, for a run refused before ``execute``."""
        if self.module.eval_engine is not None:
            self.module.eval_engine.close()

    def execute(self, run_dir: Path, identity: dict[str, Any], callbacks: list,
                resume: Path | None = None) -> tuple[dict[str, float], Path | None]:
        """Train and evaluate into ``run_dir``; ``resume``: a ``last.ckpt`` of this run to continue from.

        ``perf/train_seconds`` is ``trainer.fit``'s wall time, as RL's: the evaluations and checkpoints during
        fit included (``perf/tokens_per_s`` counts the training steps' own seconds). ``perf/eval_seconds``:
        this process's evaluations, those during fit and the final one (SFT has no starting evaluation), and
        starting the evaluation engine; not the checkpoints written after them.
        """
        cfg = self.cfg
        loggers = make_loggers(cfg, run_dir, identity)
        every = cfg["eval"]["every_n_steps"]  # optimizer steps
        checkpoints = resume_callback(cfg, run_dir, optimizer_steps, every)
        self.datamodule.skip = checkpoints.skip
        trainer = make_trainer(
            cfg, run_dir, loggers, max_steps=int(self.plan["plan/total_steps"]),
            callbacks=[*default_callbacks(cfg, planned_epochs(self.plan)), checkpoints, *callbacks],
            val_check_interval=every or None, accumulate_grad_batches=cfg["sft"]["grad_accum"],
            gradient_clip_val=cfg["optim"]["grad_clip"] or None,
        )
        if every:
            evaluate_after_steps(trainer, every)
        if resume is None:  # a resumed run logged these when it started
            for logger in loggers:
                logger.log_hyperparams({})
                logger.log_metrics(self.plan, step=0)
        engine_s = 0.0  # starting the evaluation engine (once, here, when fit evaluates): evaluation time
        try:
            if every and self.module.eval_engine is not None:  # needed mid-training: fail now, not after N steps
                start = time.perf_counter()
                engine = self.module.eval_engine.runtime(self.module.model, self.module.tokenizer)
                check_fits(engine, [r.prompt for r in self.module.eval_records], cfg["eval"]["max_new_tokens"],
                           "data.eval_sources")
                engine_s = time.perf_counter() - start
            start = time.perf_counter()
            trainer.fit(self.module, datamodule=self.datamodule, ckpt_path=resume, weights_only=True)
            train_s = time.perf_counter() - start
            last_train = {k: float(v) for k, v in trainer.callback_metrics.items()
                          if k.startswith(("train/", "perf/"))}
            save_model(self.module.model, self.module.tokenizer, run_dir / "model")  # kept if evaluation fails
            if (not every or trainer.global_step % every
                    or not any(k.startswith("val/") for k in trainer.callback_metrics)):  # resumed at the end
                trainer.validate(self.module, datamodule=self.datamodule, verbose=False)
        finally:
            if self.module.eval_engine is not None:
                self.module.eval_engine.close()
        metrics = {**last_train, **{k: float(v) for k, v in trainer.callback_metrics.items() if "/" in k}}
        metrics.update(self.plan)
        metrics.update({"perf/train_seconds": train_s, "train/steps": float(trainer.global_step),
                        "perf/eval_seconds": engine_s + self.module.eval_seconds,
                        # all ranks, this process's steps (a resumed run's earlier ones took other seconds)
                        "perf/tokens_per_s": self.module.tokens_per_s(),
                        "perf/torch_threads": float(torch.get_num_threads()),
                        "perf/world_size": float(trainer.world_size)})
        if self.module.last_eval:
            write_samples(run_dir / "eval_samples.jsonl", self.module.last_eval)
            log_samples_table(loggers, self.module.last_eval, cfg["tracking"]["wandb"]["log_samples"], "val/samples")
        return metrics, finish_loggers(loggers, metrics)


def evaluate_after_steps(trainer: L.Trainer, every_n_steps: int) -> None:
    """Evaluate right after every ``every_n_steps``-th optimizer step.

    Lightning's ``val_check_interval`` counts micro-batches over epochs, while accumulation windows restart
    every epoch (and an epoch's last may be short): past the first epoch its evaluations fell mid-step, one
    due at the end could be missed, and a checkpoint written with one did not resume exactly. This replaces
    the epoch loop's (private) decision; Lightning's validation loop, hooks and restart logic are unchanged.
    """
    loop = trainer.fit_loop.epoch_loop

    def due(data_fetcher: Any) -> bool:
        stepped = not loop._should_accumulate()  # this batch ended a step (Lightning's own test, as it steps)
        return stepped and trainer.global_step > 0 and trainer.global_step % every_n_steps == 0

    loop._should_check_val_fx = due


class StepLRMonitor(LearningRateMonitor):
    """Lightning's LearningRateMonitor, one row per optimizer step: it logs at every batch's start, so with
    ``sft.grad_accum`` micro-batches it wrote each step's learning rate that many times."""

    def __init__(self) -> None:
        super().__init__(logging_interval="step")
        self._logged_step = -1

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        if trainer.global_step != self._logged_step:  # the first micro-batch of the step
            self._logged_step = trainer.global_step
            super().on_train_batch_start(trainer, *args, **kwargs)


class PlannedEpochsProgressBar(RichProgressBar):
    """Lightning's RichProgressBar, its "Epoch i/last" counted against the plan's epochs.

    The run stops at ``max_steps`` and leaves ``max_epochs`` at -1 (no epoch limit), which Lightning's
    bar printed as "Epoch 0/-2". Only the label changes: the Trainer's limits, hence the steps, stay.
    """

    def __init__(self, epochs: int | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.epochs = epochs

    @property
    def total_train_batches(self) -> int | float:
        """This epoch's batches up to ``max_steps``, counted as the bar counts (``batch_idx + 1``): with the
        ones a resumed epoch skipped (the bar read 10/5 after a resume at step 5 of 10), and steps turned
        into batches under gradient accumulation (Lightning compares its remaining steps with batches)."""
        trainer = self.trainer
        total = trainer.num_training_batches
        if trainer.max_steps is not None and trainer.max_steps > 0:
            loop = trainer.fit_loop.epoch_loop  # a resumed epoch's restored batches; a fresh epoch's count is
            done = loop.batch_progress.current.ready if loop.restarting else 0  # reset only after this is read
            left = (trainer.max_steps - trainer.global_step) * trainer.accumulate_grad_batches
            total = min(total, done + left)
        return total

    def _get_train_description(self, current_epoch: int) -> str:
        limit = self.trainer.max_epochs
        if limit is not None and limit >= 0:  # a real limit: Lightning's own label
            return super()._get_train_description(current_epoch)
        label = f"Epoch {current_epoch}" + (f"/{self.epochs - 1}" if self.epochs else "")  # 0-based, as Lightning
        return f"{label:{len(self.validation_description)}}"  # padded like Lightning's: no flicker


def planned_epochs(plan: dict[str, float]) -> int:
    """Epochs the planned optimizer steps reach (a started one counts: ``sft.epochs=1.5`` is 2)."""
    return math.ceil(plan["plan/total_steps"] / plan["plan/steps_per_epoch"])


def passes(plan: dict[str, float]) -> float:
    """How many times the planned optimizer steps pass over the training rows (``sft.epochs=1.5``: 1.5)."""
    return plan["plan/total_steps"] / plan["plan/steps_per_epoch"]


def default_callbacks(cfg: dict[str, Any], epochs: int | None = None) -> list:
    out: list = [StepLRMonitor()]
    if cfg["trainer"].get("progress_bar", True):
        out.append(PlannedEpochsProgressBar(epochs, leave=True))
    return out


def prepare_sft(cfg: dict[str, Any]) -> SFTStage:
    """Everything that may fail on bad input happens here, before the run directory exists."""
    check_trainer(cfg)
    check_wandb_login(cfg)
    builders.set_threads(cfg)
    L.seed_everything(cfg["run"]["seed"], workers=True, verbose=False)
    records, data_stats, eval_records = builders.build_run_records(cfg)  # decontaminated (data.decontaminate_ngram)
    without = check_responses(records)
    warn_trained_heldout(records, eval_records)  # exact matches that decontamination, when on, left
    sampling = builders.eval_sampling(cfg, eval_records)
    rewards = builders.build_eval_rewards(cfg)
    eval_engine = builders.eval_engine(cfg)  # not started: a broken engine is refused before the model loads
    tokenizer, model = build_tokenizer_and_model(cfg, builders.tokenizer_corpus(records, eval_records))
    max_len = cfg["data"]["max_length"]
    examples, dropped = tokenize_records(tokenizer, records, max_len)
    if not examples:
        raise DataError(f"no SFT example fits data.max_length={max_len} (dropped {dropped} longer ones)")
    if dropped:  # a silent drop changes the data mix (a fixed budget is no longer fixed)
        total = dropped + len(examples)
        warnings.warn(f"data.max_length={max_len}: {dropped} of {total} SFT examples ({dropped / total:.1%}) are "
                      "longer and were dropped; raise data.max_length to keep them", UserWarning, stacklevel=2)
    rows_per_batch = rows_per_micro_batch(cfg)
    dm = SFTDataModule(examples, capacity=max_len, rows_per_batch=rows_per_batch, pack=cfg["data"]["pack"],
                       pad_id=tokenizer.pad_token_id, seed=cfg["run"]["seed"],
                       step_windows=step_windows(cfg))
    plan = sft_plan(cfg, dm, examples, dropped, model)
    rows = f"{len(dm.rows):,} packed training rows ({len(examples):,} examples)"
    if problem := many_epochs_problem(cfg["sft"]["max_steps"], passes(plan), rows):
        warnings.warn(problem, UserWarning, stacklevel=2)
    plan.update(data_stats)
    plan["plan/dropped_no_response"] = float(without)
    module = SFTModule(
        model, tokenizer, optim=builders.optim_settings(cfg, int(plan["plan/total_steps"])),
        eval_rewards=rewards, eval_records=eval_records, max_new_tokens=cfg["eval"]["max_new_tokens"],
        eval_batch_size=cfg["eval"]["batch_size"], eval_sampling=sampling,
        eval_engine=eval_engine, compile_forward=cfg["trainer"]["compile"], loss=cfg["sft"]["loss"],
    )
    return SFTStage(cfg, module, dm, plan, data_digests(records, eval_records))


def step_windows(cfg: dict[str, Any]) -> int:
    """The accumulation window the loader reads ahead (0: none): ``step-token-mean`` needs each step's loss
    tokens, ``token-mean`` over several micro-batches each window's length (an epoch's last may be short)."""
    accum = cfg["sft"]["grad_accum"]
    return accum if cfg["sft"]["loss"] == "step-token-mean" or accum > 1 else 0


def check_responses(records: list) -> int:
    """How many training records lack a teacher response (SFT skips them), with a warning naming the
    count; none with one (say, a verl RL file as SFT data) is a DataError."""
    without = sum(r.response is None for r in records)
    if without == len(records):
        first = first_read(records) if records else None
        where = f"; the first, {first.origin}, " if first and first.origin else ""
        raise DataError(f"data.sources: none of the {len(records)} training records has a teacher response to "
                        f"train on{where or ' '}(SFT data holds chat messages ending in an assistant turn, or a "
                        "'response' field; a blank response counts as none)")
    if without:  # like a length drop, it shrinks a fixed budget
        first = first_read([r for r in records if r.response is None])
        where = f", read from {first.origin}" if first.origin else ""
        warnings.warn(f"data.sources: {without} of {len(records)} training records have no teacher response (a "
                      f"blank one counts as none) and are skipped (the first: {first.uid!r} of source "
                      f"{first.source!r}{where})", UserWarning, stacklevel=3)
    return without


def sft_plan(cfg: dict[str, Any], dm: SFTDataModule, examples: list, dropped: int,
             model: torch.nn.Module) -> dict[str, float]:
    """Derived quantities (steps: :func:`klear_lab.stages.sft_steps.planned_sft_steps`; tokens per step, world
    times a rank's under DDP), computed once and logged."""
    from klear_lab.distributed import device_count
    from klear_lab.stages.sft_steps import planned_sft_steps

    s, world = cfg["sft"], device_count(cfg["trainer"])
    accum = s["grad_accum"]
    steps_per_epoch, total = planned_sft_steps(len(dm.rows), dm.rows_per_batch, accum, world, s["epochs"],
                                               s["max_steps"])
    return {
        "plan/total_steps": float(total), "plan/steps_per_epoch": float(steps_per_epoch),
        "plan/examples": float(len(examples)), "plan/dropped_too_long": float(dropped),
        "plan/tokens_per_step": float(dm.rows_per_batch * accum * dm.capacity * world),
        "plan/params": float(sum(p.numel() for p in model.parameters())),
        "perf/packing_efficiency_data": dm.efficiency,
    }
