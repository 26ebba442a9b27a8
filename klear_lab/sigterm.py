"""SIGTERM outside training steps: the evaluations ``trainer.validate`` runs and the model save after training.

During training :class:`klear_lab.checkpointing.ResumeCheckpoint` notes a SIGTERM and stops at the next step
that can be checkpointed. Around it:

- **An evaluation outside fit** (RL's starting point, every stage's final evaluation). Lightning's handler
  broadcasts from inside the signal handler on every rank, at whatever point each rank is: a SIGTERM that
  reached DDP rank 1 during the final evaluation hung both ranks for good (rank 0 was in the evaluation's
  collectives; Lightning 2.6.6). :class:`SigtermOutsideSteps` only notes it; the ranks agree at the
  evaluation's end, where every rank is. Before training that stops the run (nothing trained is lost:
  Lightning's ``SIGTERMException``, as a SIGTERM during a step); after training the run goes on.
- **After training** the model is saved and evaluated before the run ends, as when the signal comes in
  the final step: :func:`hold_sigterm` holds a SIGTERM back from the end of fit to the run's end
  (:func:`sigterm_restored`, around the run in :mod:`klear_lab.run`), so it does not kill the process
  while it writes the model. A signal held back is handed on once the run is recorded: to the handler
  before the run when that is a Python one; else ``RunResult.sigterm_held`` says so (the CLI exits 0 for a
  completed run; a ``model.init_from`` parent trained inside another run's command stops that command).

Left alone: between Lightning's registration of its handler and ``on_validation_start`` (milliseconds:
the stage's barrier, the loader's setup) Lightning's handler is still the one a SIGTERM meets.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()  # (only it may set signal handlers)


@dataclass
class HeldSigterm:
    """The SIGTERMs a run held back after training (see :func:`sigterm_restored`)."""

    signals: int = 0


_held: HeldSigterm | None = None  # the open sigterm_restored block's count (None: outside a run)


class SigtermOutsideSteps(L.Callback):
    """Note a SIGTERM during ``trainer.validate`` in place of Lightning's handler and decide at its end;
    hold one back from the end of fit (:func:`hold_sigterm`)."""

    def __init__(self) -> None:
        self._catching = False  # this callback's handler is set for the running evaluation
        self._noted = False  # a SIGTERM came during it (or after its agreement, before fit: on_train_start)
        self._fitted = False  # this trainer's fit has ended: training is done

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Training is done (a fit stopped by a signal or an error raises instead). Lightning has put back
        the handler from before fit already."""
        self._fitted = True
        hold_sigterm()

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn != TrainerFn.VALIDATING or not _main_thread() or signal.getsignal(signal.SIGTERM) is None:
            return  # (evaluations inside fit: ResumeCheckpoint's; None: set outside Python, left alone)

        def note(signum: int, frame: Any) -> None:
            self._noted = True

        self._catching, self._noted = True, False
        signal.signal(signal.SIGTERM, note)  # Lightning's teardown of this validate puts back the one before it

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Every rank is here: agree on whether any rank got a SIGTERM (one collective)."""
        if not self._catching or trainer.state.fn != TrainerFn.VALIDATING:
            return
        self._catching = False
        noted = self._noted
        if trainer.world_size > 1:
            noted = trainer.strategy.reduce_boolean_decision(noted, all=False)
        if not noted:
            return  # (a signal from here to Lightning's teardown is noted still: on_train_start hands it on)
        self._noted = False
        if not self._fitted:  # the starting point's evaluation: stop before the first step
            raise SIGTERMException
        if _held is not None:
            _held.signals += 1
        if trainer.is_global_zero:
            print("klear-lab: SIGTERM during the final evaluation: finishing the run first", file=sys.stderr)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """A SIGTERM noted after the starting evaluation's agreement goes to fit's handler (after
        ResumeCheckpoint's on_train_start: this callback is the Trainer's last), which stops at a step's end."""
        if self._noted:
            self._noted = False
            signal.raise_signal(signal.SIGTERM)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._catching = False


def _count_held(signum: int, frame: Any) -> None:
    """The SIGTERM handler after training: counts the signals it holds back."""
    if _held is not None:
        _held.signals += 1


def hold_sigterm() -> None:
    """At the end of training: hold a SIGTERM back (counted, not acted on) until the run ends.

    Training is done: stopping in the model's save left no model and a run recorded as running, and
    stopping in the final evaluation recorded a finished run as failed. A ``trainer.validate`` keeps this
    handler among Lightning's, and :class:`SigtermOutsideSteps` sets its own for the evaluation. Only
    inside :func:`sigterm_restored`, which puts the handler before back.
    """
    if _held is not None and _main_thread() and signal.getsignal(signal.SIGTERM) is not None:
        signal.signal(signal.SIGTERM, _count_held)


@contextmanager
def sigterm_restored(say: bool = True) -> Iterator[HeldSigterm]:
    """Around a run (its stage and its completion): put back the SIGTERM handler from before it, and count
    the signals held back after training. When the run ends normally with some, ``say`` so and hand one
    on to that handler if it is a Python function (a caller's own); SIG_DFL would end the process with a
    completed run read as preempted, so the caller reads the count instead (``RunResult.sigterm_held``)."""
    global _held
    outer, held = _held, HeldSigterm()
    previous = signal.getsignal(signal.SIGTERM) if _main_thread() else None
    _held = held
    try:
        yield held
    finally:
        _held = outer
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if held.signals and say:
        print("klear-lab: SIGTERM after training: the run saved its model, evaluated it and completed first",
              file=sys.stderr)
    if held.signals and callable(previous):
        signal.raise_signal(signal.SIGTERM)
