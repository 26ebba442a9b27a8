"""Pieces both stages use: the Lightning Trainer, model saving, W&B sample tables, finishing loggers."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lightning as L
from lightning.pytorch.loggers import WandbLogger

from klear_lab.distributed import is_rank_zero
from klear_lab.tracking import atomic_write

if TYPE_CHECKING:
    from klear_lab.eval.heldout import EvalResult


class _NoLitLoggerTip(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "litlogger" not in record.getMessage()


@contextlib.contextmanager
def without_upstream_noise() -> Iterator[None]:
    """Hide messages that say nothing about the run.

    Lightning's advert for its hosted logger (an INFO record on each Trainer), the deprecation
    Lightning 2.6's ``_pytree`` triggers in torch 2.13 (``LeafSpec``), which no config can fix, and,
    under DDP, its advice against a distributed sampler in ``validate``: the validation loader is a
    one-item placeholder, and evaluation shards the held-out problems itself (``evaluate_sharded``).
    And one that is wrong for a resumed run (see the comment below).
    """
    log = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    tip = _NoLitLoggerTip()
    log.addFilter(tip)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", r"`isinstance\(treespec, LeafSpec\)` is deprecated")
            warnings.filterwarnings("ignore", r"Using `DistributedSampler` with the dataloaders\. During `trainer")
            # Lightning's CSVLogger warns that it deletes an existing metrics.csv (klear_lab.csv_log replaces it whole)
            warnings.filterwarnings("ignore", r"Experiment logs directory .* exists and is not empty")
            yield
    finally:
        log.removeFilter(tip)


def make_trainer(cfg: dict[str, Any], run_dir: Path, loggers: list, *, max_steps: int, callbacks: list,
                 val_check_interval: int | None = None, max_epochs: int = -1, log_every_n_steps: int | None = None,
                 **kwargs: Any) -> L.Trainer:
    """A Trainer whose accelerator, devices, strategy and precision come from ``trainer.*``.

    DDP/FSDP on GPUs is configuration (``trainer.strategy=fsdp``), not code. ``log_every_n_steps``: the
    stage's own interval over ``trainer.log_every_n_steps``.
    """
    from lightning.pytorch.callbacks import LearningRateMonitor

    from klear_lab.checkpoint_io import RunDirCheckpointIO
    from klear_lab.sigterm import SigtermOutsideSteps

    t = cfg["trainer"]
    if not loggers:  # tracking.csv=false and no W&B: the monitor has nowhere to log and would fail the run
        callbacks = [c for c in callbacks if not isinstance(c, LearningRateMonitor)]
    callbacks = [*callbacks, SigtermOutsideSteps()]  # SIGTERM in trainer.validate, after training
    return L.Trainer(
        accelerator=t["accelerator"], devices=t["devices"], strategy=t["strategy"], precision=t["precision"],
        max_steps=max_steps, max_epochs=max_epochs, logger=loggers or False, callbacks=callbacks,
        default_root_dir=str(run_dir),
        log_every_n_steps=t["log_every_n_steps"] if log_every_n_steps is None else log_every_n_steps,
        # None: no evaluation during fit (the stages run the final one); Lightning's "never" is an interval
        # counted over epochs that no run reaches (with check_val_every_n_epoch=1 it evaluated every epoch)
        val_check_interval=val_check_interval or 2**62, check_val_every_n_epoch=None,
        num_sanity_val_steps=0, enable_model_summary=False,
        enable_progress_bar=any(type(c).__name__.endswith("ProgressBar") for c in callbacks),
        enable_checkpointing=False, **kwargs,  # checkpoints: klear_lab.checkpointing.ResumeCheckpoint
        # written in the run directory, not staged in /tmp (XLA takes only its own checkpoint writer)
        plugins=[] if str(t["accelerator"]) == "tpu" else [RunDirCheckpointIO()],
    )


def check_wandb_login(cfg: dict[str, Any]) -> None:
    """A run that logs to W&B online needs W&B credentials on this machine; without them ``wandb.init``
    raised a traceback once the run directory existed.

    W&B's own lookup (``WANDB_API_KEY``, its settings, ``.netrc``; no prompt), run in a child process:
    ``wandb.login`` answers from this process's W&B state (False while a run is open, or after an offline
    run) and would fix that state for the runs that follow (an ``init_from`` parent trained here).

    Raises:
        ConfigError: no credentials, with the two ways on.
    """
    from klear_lab.errors import ConfigError
    from klear_lab.loggers import wandb_mode

    if wandb_mode(cfg) != "online":
        return
    env = {**os.environ, "WANDB_MODE": "online", "WANDB_SILENT": "true"}  # silent: no "logged in as" server call
    code = "import sys, wandb; sys.exit(0 if wandb.login(verify=False, prompt=False) else 3)"
    try:
        done = subprocess.run([sys.executable, "-c", code], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return  # the check could not answer: wandb.init will
    if done.returncode == 3:
        raise ConfigError("tracking.wandb.mode=online: no W&B API key on this machine (WANDB_API_KEY, or "
                          "`wandb login`); log in, or run with tracking.wandb.mode=offline and `wandb sync` later")
    # any other failure of the check itself: wandb.init will say what is wrong


def check_trainer(cfg: dict[str, Any]) -> None:
    """Lightning's own check of ``trainer.accelerator/devices/strategy/precision``, before anything is written.

    Lightning checks the combination (FSDP needs a GPU, ``gpu`` needs one visible, DeepSpeed needs its
    package) when a Trainer is made, after the run directory and W&B run exist. A Trainer made here
    with those four settings alone fails the same way, first; it starts no process.

    Raises:
        ConfigError: naming the settings and Lightning's reason.
    """
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    from klear_lab.errors import ConfigError

    t = cfg["trainer"]
    log = logging.getLogger("lightning.pytorch.utilities.rank_zero")  # "GPU available: ..." once is enough
    level = log.level
    log.setLevel(logging.WARNING)
    try:
        L.Trainer(accelerator=t["accelerator"], devices=t["devices"], strategy=t["strategy"], precision=t["precision"],
                  logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    except (ValueError, TypeError, RuntimeError, ImportError, MisconfigurationException) as exc:  # devices=-1: Type
        settings = " ".join(f"trainer.{k}={t[k]!r}" for k in ("accelerator", "devices", "strategy", "precision"))
        raise ConfigError(f"{settings}: Lightning cannot train with these here: {exc}") from None
    finally:
        log.setLevel(level)


def save_model(model, tokenizer, path: Path) -> None:
    """Save as a plain HF directory, so the next stage loads it like any checkpoint (rank 0 only)."""
    if not is_rank_zero():
        return
    stop_at_turn_end(model, tokenizer)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)


def stop_at_turn_end(model, tokenizer) -> None:
    """Give the model's generation config every id rollouts stop at, the chat template's turn end included
    (Qwen3-Base: ``<|im_end|>`` beside its eos ``<|endoftext|>``), so that a tool serving the saved model stops
    where SFT taught it to end a turn. A config that already names them all is left as it is."""
    from klear_lab.rl.rollout.base import eos_token_ids

    config = getattr(model, "generation_config", None)
    if config is None:
        return
    ids = eos_token_ids(tokenizer, model)
    named = config.eos_token_id if isinstance(config.eos_token_id, (list, tuple)) else [config.eos_token_id]
    if not set(ids) <= set(named):
        config.eos_token_id = ids


def wandb_logger(loggers: list) -> WandbLogger | None:
    return next((lg for lg in loggers if isinstance(lg, WandbLogger)), None)


def log_samples_table(loggers: list, result, n: int, key: str) -> None:
    """Log ``n`` evaluation samples (prompt, completion, answer, correct) as a W&B table."""
    wb = wandb_logger(loggers)
    if wb is None or n <= 0:
        return
    rows = [[r.prompt, c[0], r.answer, ok[0], score] for r, c, ok, score in
            zip(result.records[:n], result.completions[:n], result.verdicts[:n], result.scores[:n])]
    # one completion per problem; "score" is the fraction of its eval.samples that pass
    wb.log_table(key=key, columns=["prompt", "completion", "answer", "correct", "score"], data=rows)


def write_samples(path: Path, result: EvalResult) -> None:
    """One JSON line per problem: uid, source, level, prompt, answer, completions, verdicts, score (rank 0)."""
    if not is_rank_zero():
        return
    lines = [json.dumps({"uid": r.uid, "source": r.source, "level": r.difficulty, "prompt": r.prompt,
                         "answer": r.answer, "completions": c, "verdicts": v, "score": s})
             for r, c, v, s in zip(result.records, result.completions, result.verdicts, result.scores)]
    atomic_write(path, lambda tmp: tmp.write_text("".join(line + "\n" for line in lines)))


def finish_loggers(loggers: list, summary: dict[str, float]) -> Path | None:
    """Write the final summary into W&B, finish the W&B run, flush the CSV; return the W&B run dir.

    Other DDP ranks hold placeholder loggers (Lightning's): nothing to finish there.
    """
    wandb_dir = None
    if not is_rank_zero():
        return None
    for lg in loggers:
        if isinstance(lg, WandbLogger):
            run = lg.experiment
            for k, v in summary.items():
                run.summary[k] = v
            wandb_dir = Path(run.dir).parent
            run.finish()
        else:
            lg.save()
    return wandb_dir
