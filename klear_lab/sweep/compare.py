"""The ablation table: one row per arm, mean ± std (n) across seeds, delta vs baseline with a 95 % CI.

The delta is mean(arm) - mean(baseline) of the objective, with two 95 % intervals: a percentile
bootstrap that resamples each arm's seeds independently (numpy ``default_rng(seed)``, so the
table is reproducible), and Welch's t interval (both ``klear_lab.stats``). With a handful of seeds the
bootstrap interval is far too narrow (2 seeds: it excludes 0 for about 1 in 3 pairs of arms that do
not differ); Welch's widens with few seeds, so read a difference as real only when it excludes 0.
The best arm (★) is chosen among arms with a finite objective on every seed (:func:`star_best`).
Outputs in ``SWEEP_DIR/compare/``: ``table.csv``, ``table.md`` and
``curves.png`` (each arm's metric over steps, mean across seeds with a ±std band, read from
each trial's ``metrics.csv``). The table's text (markdown, cells, notes) is ``compare_text.py``'s.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from klear_lab.errors import ConfigError
from klear_lab.stats import bootstrap_diff, welch_interval
from klear_lab.sweep.axes import Axis
from klear_lab.sweep.baseline_table import baseline_source, table_baseline
from klear_lab.sweep.best import star_best
from klear_lab.sweep.compare_text import table_metrics, table_notes, to_markdown
from klear_lab.sweep.grid import arm_point, canonical_point, distinct_labels, grid_arms, point_key
from klear_lab.sweep.spec import SweepSpec


@dataclass
class TrialRecord:
    """What the table needs from one trial."""

    arm: str
    seed: int
    state: str
    metrics: dict[str, float] = field(default_factory=dict)
    run_dir: str | None = None
    point: str | None = None
    number: int | None = None  # the Optuna trial number
    config_error: bool = False  # failed on a config or data error, or diverged: a rerun fails it the same way
    error: str = ""  # why it failed


def records_from_study(study: Any) -> list[TrialRecord]:
    """One record per trial that got an arm label (every sweep trial), in trial order; ``config_error``
    marks the failed trials ``klear-lab sweep`` tells to fix the config first (``launch.config_failures``)."""
    from klear_lab.sweep.launch import config_failures

    refused = {t.number for t in config_failures(study, None)}
    out = []
    for t in study.get_trials(deepcopy=False):
        if "arm" in t.user_attrs:
            out.append(TrialRecord(t.user_attrs["arm"], t.user_attrs.get("seed", 0), t.state.name,
                                   dict(t.user_attrs.get("metrics") or {}), t.user_attrs.get("run_dir"),
                                   canonical_point(t.user_attrs.get("point")), t.number, t.number in refused,
                                   str(t.user_attrs.get("error") or "")))
    return out


def load_records(spec: SweepSpec, study: Any) -> list[TrialRecord]:
    """The study's trial records, with objective/table metrics a run logged but did not return, one
    completed trial per arm and seed (:func:`one_per_seed`).

    A grid keeps the spec's points only: a study may hold seeds or axis values the spec has dropped.
    Its trials take the spec's arm labels (a value the spec now writes ``1.0`` was run as ``1``).
    """
    from klear_lab.sweep.trial import fill_from_csv

    records = records_from_study(study)
    if spec.sampler == "grid":
        labels = {point_key(arm.params, seed): arm.label for arm in grid_arms(spec) for seed in spec.seeds}
        records = [r for r in records if r.point in labels]
        for r in records:
            r.arm = labels[r.point]
    else:
        label_sampled_points(spec, records)
    for r in records:  # runs from before a metric was added to the spec, or that only logged it
        r.run_dir = spec.own_run_dir(r.run_dir)
        if r.state == "COMPLETE":
            fill_from_csv(r.metrics, r.run_dir, [spec.metric, *spec.metrics])
    return one_per_seed(records)  # the table, curves, rescore and reproduce count a seed once


def label_sampled_points(spec: SweepSpec, records: list[TrialRecord]) -> None:
    """tpe/random: an arm is one sampled point, its seeds pooled, whatever its label: two points whose
    labels print alike (lr 0.00012341 and 0.00012344: ``lr=0.0001234``) are two arms, both labelled with
    more digits (:func:`distinct_labels`). A trial without a point keeps its label."""
    keys = [_arm_key(r, spec.axes) for r in records]
    labels: dict[str, str] = {}
    points: dict[str, dict[str, Any]] = {}
    for r, (key, point) in zip(records, keys, strict=True):
        labels.setdefault(key, r.arm)
        if point is not None:
            points[key] = point
    labels = distinct_labels(spec.axes, labels, points)
    for r, (key, _) in zip(records, keys, strict=True):
        r.arm = labels[key]


def _arm_key(record: TrialRecord, axes: list[Axis]) -> tuple[str, dict[str, Any] | None]:
    """The identity of a trial's arm (its axis values at full precision, else its label) and those values."""
    point = arm_point(record.point, axes)
    return (record.arm if point is None else json.dumps(point, sort_keys=True)), point


def summarize(records: list[TrialRecord], objective: str, metrics: list[str], direction: str,
              baseline: str | None, arm_order: list[str] | None = None, seed: int = 0,
              seeds_per_arm: int | None = None) -> pd.DataFrame:
    """The comparison table as a DataFrame (one row per arm, in ``arm_order``); ``seeds_per_arm``: the
    seeds an arm is complete with (:func:`arm_seeds`; None: every seed the records hold)."""
    order = list(arm_order or [])
    order = list(dict.fromkeys([*order, *(r.arm for r in records)]))
    records = one_per_seed(records)
    done = [r for r in records if r.state == "COMPLETE"]
    names = table_metrics(objective, metrics)
    rows = []
    for arm in order:
        mine = [r for r in done if r.arm == arm]
        row: dict[str, Any] = {"arm": arm, "n": len(mine),
                               "pruned": len({r.seed for r in records if r.arm == arm and r.state == "PRUNED"}),
                               "failed": failed_seeds([r for r in records if r.arm == arm])}
        for m in names:
            vals = _values(mine, m)
            row[f"{m} mean"] = float(vals.mean()) if len(vals) else math.nan
            row[f"{m} std"] = float(vals.std(ddof=1)) if len(vals) > 1 else math.nan
            row[f"{m} n"] = len(vals)
        rows.append(row)
    df = pd.DataFrame(rows, columns=_columns(names))  # no arm yet (a tpe sweep before its first trial): empty
    _add_deltas(df, done, objective, baseline, seed)
    star_best(df, objective, direction, seeds=seeds_per_arm or len({r.seed for r in records}))
    df["baseline"] = df["arm"] == baseline
    return df


def arm_seeds(spec: SweepSpec) -> int | None:
    """1 for a tpe/random sweep over a float range without a step: each arm is a point drawn once, with the
    seed its turn gives, and never gets the others (the star's note called each "1 seed not finished");
    else None (every seed)."""
    return 1 if spec.sampler != "grid" and any(a.is_continuous for a in spec.axes) else None


def one_per_seed(records: list[TrialRecord]) -> list[TrialRecord]:
    """``records`` with one completed trial per arm and seed (the latest), and a seed's pruned or failed
    trials only while it has none: a tpe or random sampler that draws an arm again runs a seed again,
    and the same config and seed is the same run (reproducible), so the table counted one measurement
    as several seeds (``n=3`` of one seed, a narrower interval, an arm "complete" on a seed it lacks)."""
    latest: dict[tuple[str, int], TrialRecord] = {}
    for r in records:
        if r.state == "COMPLETE":
            mine = latest.get((r.arm, r.seed))
            if mine is None or (r.number or 0) >= (mine.number or 0):
                latest[(r.arm, r.seed)] = r
    return [r for r in records if latest.get((r.arm, r.seed), r) is r]


def failed_seeds(records: list[TrialRecord]) -> int:
    """How many seeds of one arm failed and have no finished trial (a retry that completed makes up for
    the attempts before it) and no retry queued or running (a table read mid-sweep: not failed yet)."""
    states: dict[int, set[str]] = {}
    for r in records:
        states.setdefault(r.seed, set()).add(r.state)
    return sum("FAIL" in s and not s & {"COMPLETE", "PRUNED", "WAITING", "RUNNING"} for s in states.values())


def _columns(names: list[str]) -> list[str]:
    return ["arm", "n", "pruned", "failed", *[f"{m} {part}" for m in names for part in ("mean", "std", "n")]]


def _values(records: list[TrialRecord], metric: str) -> np.ndarray:
    """The finite values of ``metric``: a run that diverged (inf) or never logged it has no value, as
    in Welch's interval (``klear_lab.stats``) and the paper reproduction."""
    vals = [r.metrics[metric] for r in records if metric in r.metrics]
    return np.array([v for v in vals if v is not None and math.isfinite(v)], dtype=float)


DELTA_COLUMNS = ("delta", "delta ci low", "delta ci high", "welch ci low", "welch ci high", "delta note")


def _add_deltas(df: pd.DataFrame, done: list[TrialRecord], objective: str, baseline: str | None,
                seed: int) -> None:
    """The delta columns; ``delta note``: why a delta has no interval (:func:`no_interval_reason`)."""
    base = _values([r for r in done if r.arm == baseline], objective) if baseline else np.array([])
    cols: dict[str, list[Any]] = {k: [] for k in DELTA_COLUMNS}
    for arm in df["arm"]:
        vals = _values([r for r in done if r.arm == arm], objective)
        both = len(vals) and len(base)
        d, lo, hi = bootstrap_diff(vals, base, seed=seed) if both else (math.nan,) * 3
        _, w_lo, w_hi = welch_interval(vals, base) if both else (math.nan,) * 3
        if arm == baseline:  # 0 by definition; an interval of the baseline against itself means nothing
            lo = hi = w_lo = w_hi = math.nan
        why = no_interval_reason(vals, base) if arm != baseline and both and math.isnan(lo) else ""
        for k, v in zip(cols, (d, lo, hi, w_lo, w_hi, why), strict=True):
            cols[k].append(v)
    for k, v in cols.items():
        df[k] = v


def no_interval_reason(arm: np.ndarray, base: np.ndarray) -> str:
    """Why ``bootstrap_diff`` gave the delta of ``arm`` (its finite values) against ``base`` no interval:
    a side with one value, or neither side varying across its seeds (a zero-width interval)."""
    if len(arm) < 2 and len(base) < 2:
        return "n=1 in both arms"
    if len(arm) < 2:
        return "n=1"
    if len(base) < 2:
        return "baseline n=1"
    return "no spread: neither arm varies across its seeds"


def compare_study(spec: SweepSpec, study: Any, out_dir: Path | None = None, console: Any = None,
                  require_finished: bool = False) -> pd.DataFrame:
    """Build, print (Rich) and save the table and curves of a sweep's study.

    Raises:
        ConfigError: ``require_finished`` and no trial has finished (nothing is written).
    """
    records = load_records(spec, study)
    if require_finished:
        check_finished(spec, records, ("COMPLETE", "PRUNED"), "compare")
    order, baseline = table_arms(spec, records)
    return write_comparison(records, spec, baseline, order, out_dir or spec.sweep_dir / "compare", console)


def check_finished(spec: SweepSpec, records: list[TrialRecord], states: tuple[str, ...], what: str) -> None:
    """Raise ConfigError (nothing written) unless a trial of ``records`` is in one of ``states``."""
    if not any(r.state in states for r in records):
        seen = ", ".join(f"{n} {s.lower()}" for s, n in sorted(Counter(r.state for r in records).items()))
        raise ConfigError(f"{spec.sweep_dir}: no finished trial to {what} ({seen or 'no trials'}); run "
                          "the sweep's command again to finish them")


def table_arms(spec: SweepSpec, records: list[TrialRecord]) -> tuple[list[str] | None, str | None]:
    """The table's arm order (a grid's arms in spec order; None for tpe/random: the trials' order) and its
    baseline label (``baseline_table.table_baseline``; None only for a tpe/random sweep with no trial and no
    ``baseline:``). ``compare`` and ``compare --rescore`` both lay out their tables with it."""
    order = [a.label for a in grid_arms(spec)] if spec.sampler == "grid" else None
    return order, table_baseline(spec, order or sorted({r.arm for r in records}), records)


def write_comparison(records: list[TrialRecord], spec: SweepSpec, baseline: str | None,
                     order: list[str] | None, out_dir: Path, console: Any = None) -> pd.DataFrame:
    """Summarize ``records``, write table.csv / table.md / curves.png, print the Rich table."""
    from klear_lab.sweep.curves import plot_curves
    from klear_lab.sweep.path_checks import writable_dir
    from klear_lab.sweep.render import print_run_notes, print_table, write_csv
    from klear_lab.tracking import atomic_write

    writable_dir(out_dir, "; `klear-lab compare --out-dir DIR` writes the table elsewhere")
    df = summarize(records, spec.metric, spec.metrics, spec.direction, baseline, order, seeds_per_arm=arm_seeds(spec))
    notes = table_notes(spec, baseline, records)
    write_csv(df, out_dir / "table.csv", baseline)
    markdown = to_markdown(df, spec.metric, spec.metrics, baseline, notes)
    atomic_write(out_dir / "table.md", lambda tmp: tmp.write_text(markdown))
    curve_notes: list[str] = []  # arms whose seeds share no logged step: no mean curve
    png = plot_curves(records, [spec.metric, *spec.metrics], out_dir / "curves.png", order, curve_notes)
    from klear_lab.console import make_console

    console = console or make_console()
    print_table(df, spec, baseline, out_dir, png, console, extra=(baseline_source(spec, baseline), *notes))
    finished = [r for r in records if r.state == "COMPLETE"]
    never = [m for m in spec.metrics if finished and not any(m in r.metrics for r in finished)]
    print_run_notes(console, curve_notes, never)
    return df
