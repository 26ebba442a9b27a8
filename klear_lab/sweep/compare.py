"""The ablation table: one row per arm, mean ± std (n) across seeds, delta vs baseline with a 95 % CI.

The delta is mean(arm) - mean(baseline) of the objective, with two 95 % intervals: a percentile
bootstrap that resamples each arm's seeds independently (numpy ``default_rng(seed)``, so the
table is reproducible), and Welch's t interval (``klear_lab.stats``). With a handful of seeds the
bootstrap interval is far too narrow (2 seeds: it excludes 0 for about 1 in 3 pairs of arms that do
not differ); Welch's widens with few seeds, so read a difference as real only when it excludes 0.
The best arm (★) is chosen among arms with a finite objective on every seed (:func:`star_best`).
Outputs in ``SWEEP_DIR/compare/``: ``table.csv``, ``table.md`` and
``curves.png`` (each arm's metric over steps, mean across seeds with a ±std band, read from
each trial's ``metrics.csv``).
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
from klear_lab.stats import negligible, welch_interval
from klear_lab.sweep.best import best_notes, star_best
from klear_lab.sweep.grid import arm_point, canonical_point, distinct_labels, grid_arms, point_key, resolve_baseline
from klear_lab.sweep.spec import Axis, SweepSpec

N_BOOT = 10_000


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
    """The study's trial records, with objective/table metrics a run logged but did not return.

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
        if r.state == "COMPLETE":
            fill_from_csv(r.metrics, r.run_dir, [spec.metric, *spec.metrics])
    return records


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


def bootstrap_diff(arm: np.ndarray, base: np.ndarray, n_boot: int = N_BOOT, seed: int = 0,
                   ) -> tuple[float, float, float]:
    """mean(arm) - mean(base) and its percentile-bootstrap 95 % interval.

    No interval (NaN bounds) unless both arms have 2 values or more: resampling one value gives back
    that value, so the interval would be as narrow as the other arm's spread (zero with one seed each).
    None either when neither arm varies: its zero width would call any difference, as in Welch's.
    """
    diff = float(arm.mean() - base.mean())
    if len(arm) < 2 or len(base) < 2 or not (spread(arm) or spread(base)):
        return diff, math.nan, math.nan
    rng = np.random.default_rng(seed)
    a = rng.choice(arm, size=(n_boot, len(arm)), replace=True).mean(axis=1)
    b = rng.choice(base, size=(n_boot, len(base)), replace=True).mean(axis=1)
    lo, hi = np.percentile(a - b, [2.5, 97.5])
    return diff, float(lo), float(hi)


def spread(values: np.ndarray) -> bool:
    """Whether ``values`` differ by more than float32 logging noise."""
    return not negligible(float(values.max() - values.min()), float(values.min()), float(values.max()))


def summarize(records: list[TrialRecord], objective: str, metrics: list[str], direction: str,
              baseline: str | None, arm_order: list[str] | None = None, seed: int = 0) -> pd.DataFrame:
    """The comparison table as a DataFrame (one row per arm, in ``arm_order``)."""
    order = list(arm_order or [])
    order = list(dict.fromkeys([*order, *(r.arm for r in records)]))
    done = [r for r in records if r.state == "COMPLETE"]
    names = table_metrics(objective, metrics)
    rows = []
    for arm in order:
        mine = [r for r in done if r.arm == arm]
        row: dict[str, Any] = {"arm": arm, "n": len(mine),
                               "pruned": sum(r.arm == arm and r.state == "PRUNED" for r in records),
                               "failed": failed_seeds([r for r in records if r.arm == arm])}
        for m in names:
            vals = _values(mine, m)
            row[f"{m} mean"] = float(vals.mean()) if len(vals) else math.nan
            row[f"{m} std"] = float(vals.std(ddof=1)) if len(vals) > 1 else math.nan
            row[f"{m} n"] = len(vals)
        rows.append(row)
    df = pd.DataFrame(rows, columns=_columns(names))  # no arm yet (a tpe sweep before its first trial): empty
    _add_deltas(df, done, objective, baseline, seed)
    star_best(df, objective, direction, seeds=len({r.seed for r in records}))
    df["baseline"] = df["arm"] == baseline
    return df


def failed_seeds(records: list[TrialRecord]) -> int:
    """How many seeds of one arm failed and have no finished trial (a retry that completed makes up for
    the attempts before it)."""
    states: dict[int, set[str]] = {}
    for r in records:
        states.setdefault(r.seed, set()).add(r.state)
    return sum("FAIL" in s and not s & {"COMPLETE", "PRUNED"} for s in states.values())


def table_metrics(objective: str, metrics: list[str]) -> list[str]:
    """The table's metric columns: the objective first; a metric listed twice is one column."""
    return list(dict.fromkeys([objective, *metrics]))


def _columns(names: list[str]) -> list[str]:
    return ["arm", "n", "pruned", "failed", *[f"{m} {part}" for m in names for part in ("mean", "std", "n")]]


def _values(records: list[TrialRecord], metric: str) -> np.ndarray:
    """The finite values of ``metric``: a run that diverged (inf) or never logged it has no value, as
    in Welch's interval (``klear_lab.stats``) and the paper reproduction."""
    vals = [r.metrics[metric] for r in records if metric in r.metrics]
    return np.array([v for v in vals if v is not None and math.isfinite(v)], dtype=float)


def _add_deltas(df: pd.DataFrame, done: list[TrialRecord], objective: str, baseline: str | None,
                seed: int) -> None:
    base = _values([r for r in done if r.arm == baseline], objective) if baseline else np.array([])
    cols: dict[str, list[float]] = {k: [] for k in ("delta", "delta ci low", "delta ci high",
                                                     "welch ci low", "welch ci high")}
    for arm in df["arm"]:
        vals = _values([r for r in done if r.arm == arm], objective)
        both = len(vals) and len(base)
        d, lo, hi = bootstrap_diff(vals, base, seed=seed) if both else (math.nan,) * 3
        _, w_lo, w_hi = welch_interval(vals, base) if both else (math.nan,) * 3
        if arm == baseline:  # 0 by definition; an interval of the baseline against itself means nothing
            lo = hi = w_lo = w_hi = math.nan
        for k, v in zip(cols, (d, lo, hi, w_lo, w_hi)):
            cols[k].append(v)
    for k, v in cols.items():
        df[k] = v


def to_markdown(df: pd.DataFrame, objective: str, metrics: list[str], baseline: str | None) -> str:
    """GitHub markdown: the best arm in bold with a star, deltas with their bootstrap and Welch intervals."""
    names = table_metrics(objective, metrics)
    head = ["arm", *names, f"Δ {objective} vs {baseline} [bootstrap 95% CI]", "Welch t 95% CI", "pruned", "failed"]
    lines = ["| " + " | ".join(h.replace("|", "\\|") for h in head) + " |", "|" + "---|" * len(head)]
    for _, row in df.iterrows():
        arm = f"**{row['arm']}** ★" if row["best"] else row["arm"]
        cells = [arm, *[cell(row, m) for m in names], delta_cell(row), welch_cell(row),
                 str(row["pruned"]), str(row["failed"])]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")  # an axis value may hold "|"
    notes = [missing_baseline_note(df, baseline), *best_notes(df), few_seeds_note(df, objective, baseline),
             one_batch_note(objective, metrics) if len(df) else ""]
    return "\n".join(lines) + "\n" + "".join(f"\n{note}\n" for note in notes if note)


FEW_SEEDS = 10  # below this many seeds an arm's percentile-bootstrap interval covers well under 95 %


def one_batch_note(objective: str, metrics: list[str]) -> str:
    """Under a table that shows training metrics of one step's batch: each seed's value is its last logged one
    (its last step's; an update's metrics, the last step that updated)."""
    from klear_lab.sweep.metrics import one_batch

    shown = [m for m in table_metrics(objective, metrics) if one_batch(m)]
    if not shown:
        return ""
    return (f"{', '.join(shown)}: each seed's last logged value, from one training batch, not a mean over the run; "
            "the curves PNG draws them over the run.")


def few_seeds_note(df: pd.DataFrame, objective: str, baseline: str | None) -> str:
    """A warning under the table when a bootstrap interval shown rests on fewer than ``FEW_SEEDS`` seeds."""
    shown = df[df["delta ci low"].notna()]
    if shown.empty:
        return ""
    n = int(min([*shown[f"{objective} n"], *df.loc[df["arm"] == baseline, f"{objective} n"]]))
    if n >= FEW_SEEDS:
        return ""
    return (f"Bootstrap intervals over {n} seed(s) per arm cover well under 95 % (two arms that do not differ "
            "are called apart in about 1 comparison of 3 at 2 seeds): call a difference only where the Welch "
            "interval excludes 0.")


def cell(row: Any, metric: str) -> str:
    """``0.512 ± 0.013 (n=2)``; ``(n=2 of 3)`` when a completed seed has no finite value (diverged)."""
    mean, std, n = row[f"{metric} mean"], row[f"{metric} std"], row[f"{metric} n"]
    if math.isnan(mean):
        return "–"
    count = f"n={n}" if n == row["n"] else f"n={n} of {row['n']}"
    return f"{mean:.4g} ± {std:.2g} ({count})" if not math.isnan(std) else f"{mean:.4g} ({count})"


def delta_cell(row: Any) -> str:
    """``+0.031 [+0.012, +0.050]``, ``baseline`` for the baseline arm."""
    if row["baseline"]:
        return "baseline"
    if math.isnan(row["delta"]):
        return "–"
    d, lo, hi = row["delta"], row["delta ci low"], row["delta ci high"]
    if math.isnan(lo):
        return f"{d:+.4g} (under 2 seeds or no spread: no interval)"
    if abs(d) <= 1e-6 * max(abs(lo), abs(hi)):  # float32-logged metrics: equal means differ by ~1e-8
        d = 0.0
    return f"{d:+.4g} [{lo:+.3g}, {hi:+.3g}]"


def welch_cell(row: Any) -> str:
    """``[-0.21, +0.27]``; ``–`` for the baseline, or when an arm has under 2 seeds or no spread."""
    if row["baseline"] or math.isnan(row["welch ci low"]):
        return "–"
    return f"[{row['welch ci low']:+.3g}, {row['welch ci high']:+.3g}]"


def compare_study(spec: SweepSpec, study: Any, out_dir: Path | None = None, console: Any = None,
                  require_finished: bool = False) -> pd.DataFrame:
    """Build, print (Rich) and save the table and curves of a sweep's study.

    Raises:
        ConfigError: ``require_finished`` and no trial has finished (nothing is written).
    """
    records = load_records(spec, study)
    if require_finished and not any(r.state in ("COMPLETE", "PRUNED") for r in records):
        states = ", ".join(f"{n} {s.lower()}" for s, n in sorted(Counter(r.state for r in records).items()))
        raise ConfigError(f"{spec.sweep_dir}: no finished trial to compare ({states or 'no trials'}); run "
                          "the sweep's command again to finish them")
    order = [a.label for a in grid_arms(spec)] if spec.sampler == "grid" else None
    baseline = table_baseline(spec, order or sorted({r.arm for r in records}))
    return write_comparison(records, spec, baseline, order, out_dir or spec.sweep_dir / "compare", console)


def table_baseline(spec: SweepSpec, labels: list[str]) -> str | None:
    """The baseline arm's label (:func:`resolve_baseline`), also when a tpe/random sampler never drew it.

    With every axis discrete, ``baseline:`` names an arm the sampler may draw, or may not: then the table
    has no deltas and says so (:func:`missing_baseline_note`) rather than refusing the sweep's trials.
    A baseline that names no arm the spec's axes allow is still a spec error.

    Raises:
        ConfigError: ``baseline:`` is malformed, or names no possible arm.
    """
    try:
        return resolve_baseline(spec, labels)
    except ConfigError:
        if spec.sampler == "grid":
            raise
        label = resolve_baseline(spec, [])  # a malformed baseline (an unknown axis key, ...) still raises
        if all(not a.is_range for a in spec.axes) and label not in {a.label for a in grid_arms(spec)}:
            raise
        return label


def missing_baseline_note(df: pd.DataFrame, baseline: str | None) -> str:
    """A line under the table when the baseline arm has no row (a tpe/random sampler never drew it)."""
    if baseline is None or baseline in set(df["arm"]):
        return ""
    return f"baseline arm {baseline} was never sampled: no deltas (add trials, or name a sampled arm in `baseline:`)"


def write_comparison(records: list[TrialRecord], spec: SweepSpec, baseline: str | None,
                     order: list[str] | None, out_dir: Path, console: Any = None) -> pd.DataFrame:
    """Summarize ``records``, write table.csv / table.md / curves.png, print the Rich table."""
    from klear_lab.sweep.curves import plot_curves
    from klear_lab.sweep.render import print_table
    from klear_lab.tracking import atomic_write

    df = summarize(records, spec.metric, spec.metrics, spec.direction, baseline, order)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(out_dir / "table.csv", lambda tmp: df.to_csv(tmp, index=False))
    markdown = to_markdown(df, spec.metric, spec.metrics, baseline)
    atomic_write(out_dir / "table.md", lambda tmp: tmp.write_text(markdown))
    png = plot_curves(records, [spec.metric, *spec.metrics], out_dir / "curves.png", order)
    print_table(df, spec, baseline, out_dir, png, console)
    finished = [r for r in records if r.state == "COMPLETE"]
    never = [m for m in spec.metrics if finished and not any(m in r.metrics for r in finished)]
    if never:  # with plugins, rl/ and reward/ names cannot be checked before the runs
        from klear_lab.console import make_console

        columns = "its column is" if len(never) == 1 else "their columns are"
        (console or make_console()).print(f"note: no finished trial logged {', '.join(never)}: {columns} "
                                          "empty; check the names against the runs' metrics.csv")
    return df
