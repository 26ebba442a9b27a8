"""Resumable training: a periodic checkpoint written whole or not at all, and a loader that skips what was consumed.

``checkpoints/last.ckpt`` is Lightning's own checkpoint (``trainer.save_checkpoint``: weights, optimizer
and LR scheduler, loop progress) plus what Lightning leaves out and an exact resume needs:

- the data position: the epoch and how many of its batches were trained on (from Lightning's own
  progress counters: a loader's count would include the batch Lightning prefetched). Lightning
  restores its loop counters but restarts a plain DataLoader at the epoch's first batch. A
  :class:`klear_lab.resumable_loader.ResumableLoader` draws the epoch's order again and skips the consumed
  batches' indices without loading them;
- the global torch and Python RNG states (restored at the start of training, as a run that never
  stopped would have them);
- the module's own records (``on_save_checkpoint`` of the module: e.g. RL's evaluations so far).

Lightning's ``ModelCheckpoint`` is not used for this file: it counts optimizer steps (an RL rollout step
makes a variable number of them) and writes in place, so a kill during the write would leave a
truncated ``last.ckpt`` behind. Here the file is written beside and renamed over the old one.

A checkpoint written at a step's end is renamed into place only after Lightning has written that step's
metrics row (at the next batch's start, or when training stops): Lightning logs a step after its callbacks'
``on_train_batch_end``, so a kill in between left a checkpoint whose resume never logged that step again.
"""

from __future__ import annotations

import json
import random
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from klear_lab.resume import checkpoint_path
from klear_lab.tracking import hashed_body, replace_durably

POSITION_KEY = "klear_resume"
EVAL_ROWS_KEY, EVAL_ROWS = "eval_rows", "updates_done"  # where evaluation rows sit (modules/eval_step.py)
CONFIG_BODY_KEY = "config_body"  # tracking.hashed_body of the run's config as JSON: a string loads weights_only


class ResumeCheckpoint(L.Callback):
    """Write ``dirpath/last.ckpt`` every ``every`` steps of ``counter(trainer)``; carry data position and RNG.

    Args:
        dirpath: the run's ``checkpoints/`` directory (the file: :func:`klear_lab.resume.checkpoint_path`).
        every: steps between checkpoints (0: never write; a resumed run still restores from one).
        counter: which step count ``every`` refers to: optimizer steps for SFT, rollout steps for RL.
        val_every: steps of ``counter`` between the Trainer's evaluations during training (0: none); the
            stage evaluates right after those steps (SFT: ``stages.sft.evaluate_after_steps``).
    """

    def __init__(self, dirpath: Path, every: int, counter: Callable[[L.Trainer], int], val_every: int = 0,
                 config_body: str = "") -> None:
        self.dirpath, self.every, self.counter, self.val_every = Path(dirpath), every, counter, val_every
        self.config_body = config_body  # what the run's config hash hashes, as JSON (resume names a changed key)
        self._seen = -1  # the step count at the last batch end looked at
        self._due = False  # a checkpoint is due and waits for a point it can be resumed from
        self._stepped = False  # the last batch ended a step (not mid gradient accumulation)
        self._pending = False  # a SIGTERM came, Lightning not yet told (one process: see _catch_sigterm)
        self._deferred_over_end = False  # it waited past an epoch's end for a step it can be resumed from
        self._previous_handler: Any = None  # the SIGTERM handler before this callback's (see _catch_sigterm)
        self._written_at = -1  # the step of the last checkpoint written
        self._unpublished = False  # written beside last.ckpt, renamed over it once its step's row is logged
        self._written_log_step = 0  # Lightning's logging step when it was written
        self._restored: dict[str, Any] | None = None

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        step = self.counter(trainer)
        self._stepped = step != self._seen
        if not self._stepped:  # mid gradient accumulation: no new optimizer step
            return
        self._seen = step
        if self._sigterm_agreed(trainer) and self._stop_on_sigterm(trainer):
            return  # written now, not after an evaluation due here (minutes at scale: past a grace period)
        self._due |= self.every > 0 and step > 0 and step % self.every == 0
        if self._due and not self._evaluation_follows(trainer):
            self._write(trainer)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self._publish(trainer)  # the previous step's row is in metrics.csv now

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """A checkpoint due at a step that an evaluation follows is written after it (with it).

        Lightning resumes a checkpoint written at a batch's end by skipping the evaluation that was due
        after that batch; one written at the evaluation's end resumes after it. So does one a SIGTERM
        during the evaluation calls for (after it, Lightning has moved its step count on: a checkpoint
        written on the exception would resume one logging step late).
        """
        if trainer.state.fn != TrainerFn.FITTING:
            return
        if self._sigterm_agreed(trainer) and self._stop_on_sigterm(trainer):
            return
        if self._due:
            self._write(trainer)
        self._publish(trainer)  # the step's train row and this evaluation's rows are logged by now

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        """SIGTERM (preemption, ``scancel``, ``docker stop``): Lightning stops after the batch; write the
        checkpoint there when it can be resumed from (a step's end, not an epoch's last batch), so the
        grace period saves the steps since the last one. A checkpoint written at the failing batch's end is
        put in place only if Lightning logged that step before the exception (else the one before stays)."""
        self._release_sigterm(trainer)
        wrote = (isinstance(exception, SIGTERMException) and self.every > 0 and self._stepped
                 and self._written_at != self._seen and trainer.state.fn == TrainerFn.FITTING)
        if wrote:  # Lightning raises it after the step's row and its end (on_advance_end)
            self._write(trainer)
        elif self._unpublished and not self._row_logged(trainer):  # raised before Lightning logged its step:
            self._unpublished = False  # resumed from it, the run would never log that step's row
            if trainer.is_global_zero:
                pending_path(checkpoint_path(self.dirpath.parent)).unlink(missing_ok=True)
        self._publish(trainer)
        if isinstance(exception, SIGTERMException) and self._noting and trainer.world_size > 1:
            # every rank stops here (see _catch_sigterm) and waits for the rename: a rank that exits first
            trainer.strategy.barrier("klear_checkpoint_renamed")  # may have rank 0 killed before it

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """A SIGTERM still pending here came at the last steps: training is done, and the run goes on to save."""
        self._release_sigterm(trainer)
        self._publish(trainer)
        if self._pending and trainer.is_global_zero:
            print("klear-lab: SIGTERM during the last training step: training is done; evaluating and saving "
                  "the model before exiting", file=sys.stderr)

    def _catch_sigterm(self, trainer: L.Trainer) -> None:
        """Take SIGTERM from Lightning and only note it; Lightning is told at the next step's end that can be
        checkpointed (:meth:`_stop_on_sigterm`). One process: Lightning stopped after whichever batch the
        signal came in, and no checkpoint can be resumed from mid gradient accumulation or at an epoch's
        last batch (nothing was written; the steps since the last checkpoint were lost).

        Several ranks (DDP, FSDP), also without checkpoints: Lightning's handler broadcasts from inside the
        signal handler, at whatever point each rank is. Rank 1 gets the signal later (rank 0 forwards it),
        so the two broadcasts can pair with different collectives, and the run hung (1 in 4 tries with
        Lightning 2.6.6). Here the ranks agree once per step, at the same point (:meth:`_sigterm_agreed`),
        and every rank stops after the same batch."""
        several = trainer.world_size > 1
        if ((self.every <= 0 and not several) or self._noting
                or threading.current_thread() is not threading.main_thread()):
            return
        previous = signal.getsignal(signal.SIGTERM)
        if previous is None:  # set outside Python: it could not be put back
            return
        self._previous_handler = previous

        def note(signum: int, frame: Any) -> None:
            self._pending = True

        signal.signal(signal.SIGTERM, note)

    def _release_sigterm(self, trainer: L.Trainer) -> None:
        """Give SIGTERM back to the handler before training (Lightning's; it restores its own at teardown).
        Not with several ranks: Lightning's would broadcast from a signal handler after training (see
        :meth:`_catch_sigterm`); a SIGTERM is only noted until Lightning's teardown puts back the one before."""
        if self._noting and trainer.world_size == 1:
            signal.signal(signal.SIGTERM, self._previous_handler)
            self._previous_handler = None

    @property
    def _noting(self) -> bool:
        """SIGTERM is noted by this callback's handler."""
        return self._previous_handler is not None

    def _sigterm_agreed(self, trainer: L.Trainer) -> bool:
        """Whether a SIGTERM is pending on any rank. Called at a step's end on every rank: with several
        ranks, one collective there (an all-reduce of one number) makes every rank take the same decision."""
        if self._noting and trainer.world_size > 1 and trainer.strategy.reduce_boolean_decision(
                self._pending, all=False):
            self._pending = True  # (not assigned the result: a signal during the all-reduce would be lost)
        return self._pending

    def _stop_on_sigterm(self, trainer: L.Trainer) -> bool:
        """At a step's end after a SIGTERM: write the checkpoint and let Lightning stop (it raises after
        this batch, or after an evaluation due here). At an epoch's last batch wait for the next step,
        once: with one step per epoch no point can be resumed from, and Lightning stops without one.
        At the final step training is done: stopping there recorded a finished run as failed, without its
        final evaluation and model, so the signal stays pending and the run goes on to save (on_train_end).
        Returns whether Lightning was told to stop."""
        if at_final_step(trainer):
            return False
        if self.every > 0:  # (several ranks without checkpoints: stop now)
            at_end = trainer.fit_loop.epoch_loop.batch_progress.is_last_batch
            if at_end and not self._deferred_over_end:
                self._deferred_over_end = True
                return False
            if not at_end and self._written_at != self._seen:
                self._write(trainer)
        self._pending = False
        trainer._signal_connector.received_sigterm = True  # Lightning's flag, read by its loops after each batch
        return True

    def _evaluation_follows(self, trainer: L.Trainer) -> bool:
        """An evaluation follows the step this batch ended (called at a step's end)."""
        return self.val_every > 0 and self._seen % self.val_every == 0

    def _write(self, trainer: L.Trainer) -> None:
        """Not at an epoch's last batch: resumed there, Lightning would run the next epoch on the finished
        epoch's iterator (no batches). The next step's end writes it instead. Nor at the final step (a
        ``max_steps`` ending mid-epoch): resumed there, the run trained no step, lost its train metrics and
        logged its final evaluation one step early; the run's earlier checkpoint is the one to resume."""
        if trainer.fit_loop.epoch_loop.batch_progress.is_last_batch or at_final_step(trainer):
            return
        self._due, self._written_at = False, self._seen
        save_beside(trainer, checkpoint_path(self.dirpath.parent))
        self._unpublished, self._written_log_step = True, trainer.fit_loop.epoch_loop._batches_that_stepped

    def _row_logged(self, trainer: L.Trainer) -> bool:
        """Lightning has logged the step of the checkpoint written last (at its end): it counts the logging
        step on (``_batches_that_stepped``, the checkpoint's resume point) only after it wrote the step's row.
        Its count of completed batches moves before the row is written, so it cannot tell."""
        return trainer.fit_loop.epoch_loop._batches_that_stepped > self._written_log_step

    def _publish(self, trainer: L.Trainer) -> None:
        """Rename the checkpoint written last over ``last.ckpt`` (rank 0): called where Lightning has logged
        its step, so a resume from it never lacks that step's metrics row."""
        if self._unpublished:
            self._unpublished = False
            if trainer.is_global_zero:
                path = checkpoint_path(self.dirpath.parent)
                replace_durably(pending_path(path), path)  # on disk before the rename: never an empty file

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        progress = trainer.fit_loop.epoch_loop.batch_progress.current
        checkpoint[POSITION_KEY] = {
            "epoch": trainer.current_epoch, "batches": progress.processed,  # the saving batch is trained on
            "torch_rng": torch.get_rng_state(), "python_rng": random.getstate(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            EVAL_ROWS_KEY: EVAL_ROWS,  # a resume keeps the row of the evaluation after this step (resume.py)
            CONFIG_BODY_KEY: self.config_body,
        }

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        self._restored = checkpoint.get(POSITION_KEY)
        if self._restored is None:
            raise RuntimeError("the checkpoint has no data position (not written by klear-lab's ResumeCheckpoint)")

    def skip(self) -> tuple[int, int]:
        """``(epoch, batches)``: the epoch to resume in and its batches to skip (``(0, 0)`` for a fresh run)."""
        if self._restored is None:
            return 0, 0
        return int(self._restored["epoch"]), int(self._restored["batches"])

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._catch_sigterm(trainer)
        if trainer.is_global_zero:  # a checkpoint a kill left unpublished: its step's row was never logged
            pending_path(checkpoint_path(self.dirpath.parent)).unlink(missing_ok=True)
        self._seen = self.counter(trainer)  # a fresh run's first micro-batch ends no step; a restored step is written
        if self._restored is not None:  # after the loader has been set up, before the next step
            torch.set_rng_state(self._restored["torch_rng"])
            random.setstate(self._restored["python_rng"])
            if self._restored["cuda_rng"] and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(self._restored["cuda_rng"])


def at_final_step(trainer: L.Trainer) -> bool:
    """Training has taken its last optimizer step (``max_steps``; RL runs have none: -1)."""
    return 0 < trainer.max_steps <= trainer.global_step


def save_beside(trainer: L.Trainer, path: Path) -> None:
    """``trainer.save_checkpoint`` (every rank joins; rank 0 writes) to :func:`pending_path` beside ``path``."""
    trainer.save_checkpoint(pending_path(path), weights_only=False)  # everything: optimizer, loops, callbacks


def pending_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp")


def resume_callback(cfg: dict[str, Any], run_dir: Path, counter: Callable[[L.Trainer], int],
                    val_every: int | None) -> ResumeCheckpoint:
    """The checkpoint callback of a run (``trainer.checkpoint_every``; 0 when ``trainer.checkpoint`` is off);
    ``val_every``: steps of ``counter`` between evaluations during training (None: none)."""
    every = cfg["trainer"]["checkpoint_every"] if cfg["trainer"]["checkpoint"] else 0
    body = json.dumps(hashed_body(cfg), sort_keys=True, default=str)
    return ResumeCheckpoint(run_dir / "checkpoints", every, counter, val_every or 0, body)


def optimizer_steps(trainer: L.Trainer) -> int:
    return trainer.global_step


def batches_trained(trainer: L.Trainer) -> int:
    return trainer.fit_loop.epoch_loop.batch_progress.total.processed
