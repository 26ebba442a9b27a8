"""The trial's run directory in Optuna as soon as training starts, so a retry can resume it.

A trial killed with its sweep (``kill -9``, preemption) never reaches the end where the worker stores
``run_dir``; its retry (Optuna's ``RetryHeartbeatStaleTrialCallback``) finds the killed run here and,
when it has a checkpoint, continues it instead of starting over (``retry.resumable_run``).
"""

from __future__ import annotations

from typing import Any

import lightning as L

from klear_lab.sweep.run_status import RUN_DIR_ATTR


class RecordRunDir(L.Callback):
    """Set the trial's ``run_dir`` user attribute at the start of ``fit`` (rank 0)."""

    def __init__(self, trial: Any) -> None:
        self.trial = trial

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero:
            self.trial.set_user_attr(RUN_DIR_ATTR, str(trainer.default_root_dir))
