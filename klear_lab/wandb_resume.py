"""The W&B logger of a resumed run: it leaves out what the stopped attempts already sent to W&B.

A resumed run goes back to its checkpoint and logs the steps between the checkpoint and the kill a
second time. W&B keeps one history per run id and plots it against ``trainer/global_step``, so
those values would appear twice (online, W&B appends them to the resumed run; offline, ``wandb sync``
uploads the run's ``offline-run-*`` directories one after the other into that one run). The stopped
attempts' metrics files (``csv/metrics.before-resume-N.csv``, kept whole by the resume) say which
metrics they logged at which step; this logger drops those. It works per metric, not per step: a
step cut short logged some of its metrics (the learning rate at its start) and not others (its loss).
The resumed run repeats those steps exactly (same weights, data position and RNG), so what W&B holds
for them is what the run would have logged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import WandbLogger

from klear_lab.tracking import csv_rows


class ResumedWandbLogger(WandbLogger):
    """Lightning's WandbLogger, leaving out the metrics ``logged`` holds for a step (``{step: {key, ...}}``)."""

    def __init__(self, *args: Any, logged: dict[int, set[str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.logged = logged

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        done = self.logged.get(step) if step is not None else None
        if done:
            metrics = {k: v for k, v in metrics.items() if k not in done}
            if not metrics:
                return
        super().log_metrics(metrics, step)


def logged_before(run_dir: Path) -> dict[int, set[str]]:
    """``{step: metric keys}`` that stopped attempts of the run in ``run_dir`` logged past the rows its
    ``csv/metrics.csv`` keeps (the steps it will log again); empty for a first attempt."""
    kept = run_dir / "csv" / "metrics.csv"
    start = max((_step(row) for row in csv_rows(kept) if row.get("step")), default=-1) if kept.is_file() else -1
    logged: dict[int, set[str]] = {}
    for path in (run_dir / "csv").glob("metrics.before-resume-*.csv"):
        for row in csv_rows(path):
            if row.get("step") and _step(row) > start:
                logged.setdefault(_step(row), set()).update(k for k, v in row.items() if v != "" and k != "step")
    return logged


def _step(row: dict[str, str]) -> int:
    return int(float(row["step"]))
