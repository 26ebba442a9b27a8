"""A resumed run writes the CSV rows it keeps back through Lightning's CSVLogger, as they were."""

from __future__ import annotations

import csv

import pytest
from lightning.pytorch.loggers import CSVLogger

from klear_lab.loggers import csv_logger
from klear_lab.resume import Resumable, set_aside_later_rows
from klear_lab.tracking import csv_rows, csv_table


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

    set_aside_later_rows(tmp_path, Resumable(log_step=1, logged=csv_table(path)), attempt=1)
    csv_logger(tmp_path, csv_rows(path))  # what a resume does: Lightning's logger restarts the file

    assert path.read_text().splitlines() == lines[:-1]  # epoch stays "0", "1" (it became "0.0")
    assert (tmp_path / "csv" / "metrics.before-resume-1.csv").read_text().splitlines() == lines


def fail_in_writerows(monkeypatch) -> None:
    """A kill while a CSV's rows are written: the write stops after the header."""
    def boom(self, rows):
        raise KeyboardInterrupt("killed while writing the rows")

    monkeypatch.setattr(csv.DictWriter, "writerows", boom)


def test_a_new_metric_key_never_leaves_metrics_csv_without_its_rows(tmp_path, monkeypatch):
    """Lightning rewrote metrics.csv in place (opened with "w") when a new key appeared: a kill then lost every row."""
    logger = csv_logger(tmp_path, [])
    for step in range(3):
        logger.log_metrics({"train/loss": 1.0 / (step + 1), "epoch": 0}, step=step)
    logger.save()
    path = tmp_path / "csv" / "metrics.csv"
    before = csv_rows(path)
    assert len(before) == 3
    logger.log_metrics({"val/acc": 0.5, "epoch": 0}, step=3)  # a new key: the header changes
    fail_in_writerows(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        logger.save()
    assert csv_rows(path) == before


def test_a_resumed_run_never_leaves_metrics_csv_without_its_kept_rows(tmp_path, monkeypatch):
    """Lightning's writer deleted metrics.csv as it started, before the kept rows were written back; it now
    continues the kept file (its header) without rewriting it."""
    first = csv_logger(tmp_path, [])
    first.log_metrics({"train/loss": 0.5, "epoch": 0}, step=0)
    first.log_metrics({"val/acc": 0.25, "epoch": 0}, step=0)
    first.save()
    path = tmp_path / "csv" / "metrics.csv"
    kept, lines = csv_rows(path), path.read_text().splitlines()
    with monkeypatch.context() as m:
        fail_in_writerows(m)
        with pytest.raises(KeyboardInterrupt):
            csv_logger(tmp_path, kept)
    assert path.read_text().splitlines() == lines
    resumed = csv_logger(tmp_path, kept)
    resumed.log_metrics({"train/loss": 0.25, "epoch": 1}, step=1)
    resumed.save()
    after = path.read_text().splitlines()
    assert after[:-1] == lines
    assert csv_rows(path)[-1] == {"epoch": "1", "step": "1", "train/loss": "0.25", "val/acc": ""}
