"""What the resume tests share (``test_resume_*.py``): the quickstart experiments, a crash at a chosen step,
and a metric's logged rows."""

from __future__ import annotations

import csv
from pathlib import Path

import lightning as L

ROOT = Path(__file__).resolve().parents[2]

SFT = str(ROOT / "experiments/quickstart/sft.yaml")
RL = str(ROOT / "experiments/quickstart/rl.yaml")


class Crash(L.Callback):
    """Raise at the end of the training batch where ``count(trainer)`` reaches ``at`` (once)."""

    def __init__(self, at: int, count) -> None:
        self.at, self.count = at, count

    def on_train_batch_end(self, trainer, *args) -> None:
        if self.count(trainer) == self.at:
            raise RuntimeError("simulated crash")


def rows(run_dir: Path, key: str) -> list[tuple[int, float]]:
    with (run_dir / "csv" / "metrics.csv").open(newline="") as f:
        return [(int(r["step"]), float(r[key])) for r in csv.DictReader(f) if r.get(key)]
