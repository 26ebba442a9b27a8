"""A run's progress for ``klear-lab runs``: the steps its ``csv/metrics.csv`` shows done and a metric's value."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from klear_lab.tracking import csv_rows

# Keys of a metrics.csv row logged at the steps done (a row of only these at index k: k steps done): an
# evaluation's (val/..., an eval run's perf/...), the data and plan rows logged at 0 before training, the learning
# rate Lightning's LearningRateMonitor logs as a step starts (lr-AdamW/pg1 at k, before step k + 1), and the
# row's step and epoch. Any other key (train/..., rl/..., reward/..., perf/tokens_per_s, a plugin's) is a
# training metric, logged at Lightning's 0-based index of the step it ends (step k at k - 1; see
# klear_lab/modules/eval_step.py).
AT_STEPS_DONE_PREFIXES = ("val/", "data/", "plan/", "lr-")
AT_STEPS_DONE_KEYS = frozenset({"step", "epoch", "perf/eval_seconds", "perf/torch_threads",
                                "perf/packing_efficiency_data"})


def run_progress(run_dir: Path, metric: str) -> tuple[int | None, float | None, list[str]]:
    """The steps done (:func:`steps_done`), ``metric`` from ``summary.json`` or else its last logged value, and
    what is wrong with either file (each is left out of the row, not the run out of the table)."""
    damaged: list[str] = []
    metrics_csv, rows = run_dir / "csv" / "metrics.csv", []
    if metrics_csv.is_file():
        try:
            rows = csv_rows(metrics_csv)
        except (OSError, ValueError, csv.Error) as exc:  # ValueError: bytes that are not UTF-8
            damaged.append(f"unreadable {metrics_csv}: {exc}")
    logged = [float(r[metric]) for r in rows if r.get(metric)]
    value = logged[-1] if logged else None
    summary = run_dir / "summary.json"
    if summary.is_file():  # written atomically: damaged by hand or by the disk, it leaves the CSV's value
        try:
            saved = json.loads(summary.read_text())
        except (OSError, ValueError) as exc:
            damaged.append(f"unreadable {summary}: {exc}")
        else:
            if not isinstance(saved, dict):
                damaged.append(f"unreadable {summary}: a JSON {type(saved).__name__}, not an object")
            elif isinstance(saved.get(metric), (int, float)) and not isinstance(saved[metric], bool):
                value = float(saved[metric])
            elif saved.get(metric) is not None:
                damaged.append(f"{summary}: {metric} is {saved[metric]!r}, not a number")
    return steps_done(rows), value, damaged


def steps_done(rows: list[dict[str, str]]) -> int | None:
    """The steps (SFT: optimizer steps, RL: rollout steps) ``metrics.csv``'s ``rows`` show done: a row with a
    training metric at index i means i + 1, any other row at k means k (a stopped run's count was one short
    when its last row was a training row); the most of them, or None when no row has a step."""
    done = [_row_steps_done(row) for row in rows]
    return max((d for d in done if d is not None), default=None)


def _row_steps_done(row: dict[str, str]) -> int | None:
    index = float(row.get("step") or "nan")  # csv_rows keeps rows whose cells are numbers or empty
    if not math.isfinite(index):
        return None
    trained = any(value != "" and key not in AT_STEPS_DONE_KEYS and not key.startswith(AT_STEPS_DONE_PREFIXES)
                  for key, value in row.items())
    return int(index) + trained
