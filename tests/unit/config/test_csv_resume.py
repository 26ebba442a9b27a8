"""A resumed run writes the CSV rows it keeps back through Lightning's CSVLogger, as they were."""

from __future__ import annotations

import pytest
from lightning.pytorch.loggers import CSVLogger

from klear_lab.resume import set_aside_later_rows
from klear_lab.tracking import csv_logger, csv_rows


@pytest.mark.filterwarnings("ignore:Experiment logs directory")  # the rows are logged again
def test_kept_rows_are_written_back_unchanged(tmp_path):
    first = CSVLogger(save_dir=str(tmp_path), name="csv", version="")
    first.log_metrics({"train/loss": 0.5, "epoch": 0}, step=0)
    first.log_metrics({"val/acc": 0.25, "epoch": 0}, step=0)
    first.log_metrics({"train/loss": 0.125, "epoch": 1}, step=1)
    first.log_metrics({"train/loss": 0.0625, "epoch": 1}, step=2)  # after the checkpoint: logged again
    first.save()
    path = tmp_path / "csv" / "metrics.csv"
    lines = path.read_text().splitlines()

    set_aside_later_rows(tmp_path, step=1, attempt=1)
    csv_logger(tmp_path, csv_rows(path))  # what a resume does: Lightning's logger restarts the file

    assert path.read_text().splitlines() == lines[:-1]  # epoch stays "0", "1" (it became "0.0")
    assert (tmp_path / "csv" / "metrics.before-resume-1.csv").read_text().splitlines() == lines
