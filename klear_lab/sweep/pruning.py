"""Optuna pruning from Lightning validation metrics, reported per update.

optuna-integration's ``PyTorchLightningPruningCallback`` reports at ``current_epoch``; klear-lab
validates every N updates inside one epoch, where every report would land on step 0 and all but
the first be ignored. This subclass reports at the updates done, the step of the evaluation's row
(optimizer steps for SFT, rollout steps for RL), in a single process, and keeps the parent's
behaviour (epoch steps, rank-0 decision broadcast, ``check_pruned()`` after fit) under DDP.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna_integration import PyTorchLightningPruningCallback


class StepPruningCallback(PyTorchLightningPruningCallback):
    """``PyTorchLightningPruningCallback`` keyed by updates done instead of epoch."""

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        """Report ``trainer.callback_metrics[monitor]`` at the updates done; prune if Optuna says so."""
        if self.is_ddp_backend or trainer.sanity_checking:
            return super().on_validation_end(trainer, pl_module)
        score = trainer.callback_metrics.get(self.monitor)
        if score is None:
            return super().on_validation_end(trainer, pl_module)  # warns about the missing key
        # a custom runner's module may lack it: its optimizer steps (where Lightning logs the evaluation
        # after step k inside fit is k - 1, but the steps of all its reports line up alike)
        updates_done = getattr(pl_module, "updates_done", None)
        step = int(updates_done() if callable(updates_done) else trainer.global_step)
        self._trial.report(float(score), step=step)
        if self._trial.should_prune():
            raise optuna.TrialPruned(f"pruned at step {step}: {self.monitor}={float(score):.4g}")
        return None
