"""Lightning's CSVLogger, its ``metrics.csv`` replaced whole, never truncated and written again in place.

Lightning's writer rewrites the file when a new metric key appears (a first ``val/acc``, say): it opens
it with ``"w"`` (truncated) and writes every row back, so a kill in that window lost the run's rows. A
resumed run lost them too: the writer deleted ``metrics.csv`` when it started, before the kept rows were
written back. Here both writes go to a file beside it that is renamed over it; the rest is Lightning's.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from klear_lab.tracking import atomic_write


class AtomicExperimentWriter(ExperimentWriter):
    """Lightning's experiment writer that starts from ``kept`` rows (a resumed run's, as the CSV holds them:
    strings) instead of deleting the file, and changes the header by writing a whole new file."""

    def __init__(self, log_dir: str, kept: list[dict[str, str]]) -> None:
        super().__init__(log_dir=log_dir)
        path = Path(self.metrics_file_path)
        if kept:
            self.metrics_keys = sorted({key for row in kept for key in row})  # Lightning keeps them sorted
            write_rows(path, self.metrics_keys, kept)
        else:  # nothing kept: start afresh, as Lightning does
            path.unlink(missing_ok=True)

    def _check_log_dir_exists(self) -> None:
        """Lightning deletes an existing ``metrics.csv`` here; ``__init__`` replaces it whole instead."""

    def _rewrite_with_new_header(self, fieldnames: list[str]) -> None:
        path = Path(self.metrics_file_path)
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
        write_rows(path, fieldnames, rows)


def write_rows(path: Path, fieldnames: list[str], rows: list[dict[str, Any]]) -> None:
    """``path`` as a CSV of ``rows`` under ``fieldnames``, written beside it and renamed over it."""
    def write(tmp: Path) -> None:
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fieldnames)
            writer.writeheader()
            writer.writerows(rows)

    atomic_write(path, write)


class KeepingCSVLogger(CSVLogger):
    """Lightning's CSVLogger writing through :class:`AtomicExperimentWriter`, starting from ``kept`` rows."""

    def __init__(self, *args: Any, kept: list[dict[str, str]] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._kept = kept or []

    @property
    @rank_zero_experiment
    def experiment(self) -> AtomicExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = AtomicExperimentWriter(log_dir=self.log_dir, kept=self._kept)
        return self._experiment
