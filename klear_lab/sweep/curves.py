"""Metric curves per arm: mean across seeds over optimizer steps, with a ±std band.

The mean and band are over completed trials, as the table's: a pruned trial's curve stops early, and
averaged in it would make the mean jump where it stops. Pruned trials are drawn apart, dotted. So is a
completed trial whose curve holds a non-finite value (it diverged: the table gives it no value either), dashed
up to its last finite value: in the mean its inf or NaN ended the arm's whole curve at that step.

Reads each trial's ``RUN_DIR/csv/metrics.csv`` (or ``RUN_DIR/metrics.csv``): Lightning's
CSVLogger, a ``step`` column and one column per metric, rows sparse. Runs whose directory is not
on this machine (workers on other machines) are skipped.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

NON_FINITE = {"nan", "inf", "-inf", "+inf", "infinity", "-infinity", "+infinity"}
"""How a logged non-finite value reads in a metrics file (Lightning writes Python's ``nan`` and ``inf``)."""


def read_curve(run_dir: str | None, metric: str) -> pd.Series | None:
    """``metric`` indexed by step (last value per step), or None when absent."""
    if not run_dir:
        return None
    candidates = [Path(run_dir) / "csv" / "metrics.csv", Path(run_dir) / "metrics.csv"]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        return None
    stat = path.stat()
    df = _metrics_frame(path, stat.st_mtime_ns, stat.st_size)
    if metric not in df.columns:
        return None
    x = "step" if "step" in df.columns else None
    rows = df[[c for c in (x, metric) if c]].dropna(subset=[metric])
    values = pd.to_numeric(rows[metric], errors="coerce")
    # a logged "nan" or "inf" (a diverged run) stays; another word ("NA", "None" from a custom runner) is no value
    logged = values.notna() | rows[metric].astype(str).str.strip().str.lower().isin(NON_FINITE)
    rows, values = rows[logged], values[logged]
    if rows.empty:
        return None
    steps = rows[x] if x else pd.Series(range(len(rows)), index=rows.index)
    return pd.Series(values.to_numpy(dtype=float), index=steps.to_numpy()).groupby(level=0).last()


@functools.lru_cache(maxsize=1024)  # a large sweep's trials; a few hundred rows each
def _metrics_frame(path: Path, mtime_ns: int, size: int) -> pd.DataFrame:
    """``path`` read once while it is unchanged (its time and size in the key): a table and PNG read each
    trial's file per metric, for the mean, the pruned and the diverged curves. Callers do not modify it."""
    return pd.read_csv(path, keep_default_na=False, na_values=[""])  # an empty cell was not logged; "nan" was


def arm_order(records: list[Any], order: list[str] | None) -> list[str]:
    return list(order or []) + sorted({r.arm for r in records} - set(order or []))


def trial_curves(records: list[Any], arm: str, metric: str, state: str) -> list[pd.Series]:
    """The curves of ``arm``'s trials in ``state`` that logged ``metric`` on this machine (``records`` from
    ``compare.load_records``: one completed trial per seed)."""
    return [s for r in records if r.arm == arm and r.state == state
            for s in [read_curve(r.run_dir, metric)] if s is not None]


def arm_curves(records: list[Any], metric: str, order: list[str] | None = None) -> dict[str, pd.DataFrame]:
    """Arm -> DataFrame(step, mean, std, n) over its completed trials' curves, in step order.

    Seeds that logged at different steps are each interpolated between their own logged steps, and only
    steps where every seed has a value are kept: the mean over whichever seeds logged a step jumped from
    one seed's value to another's, and a step only one seed logged drew that seed's value with no band.
    An arm whose seeds' step ranges never overlap has no such step: its DataFrame is empty (no curve;
    :func:`no_curve_note` names it), not a "mean" that hops from seed to seed."""
    out: dict[str, pd.DataFrame] = {}
    for arm in arm_order(records, order):
        series = [c for c in trial_curves(records, arm, metric, "COMPLETE") if finite(c)]
        if not series:
            continue
        table = pd.concat(series, axis=1).sort_index()
        table = table.interpolate(method="index", limit_area="inside").dropna()
        out[arm] = pd.DataFrame({"step": table.index, "mean": table.mean(axis=1).to_numpy(),
                                 "std": table.std(axis=1, ddof=1).fillna(0.0).to_numpy(),
                                 "n": table.count(axis=1).to_numpy()})
    return out


def finite(curve: pd.Series) -> bool:
    """Whether every value of ``curve`` is finite (a diverged run logs inf or NaN)."""
    return bool(np.isfinite(curve.to_numpy(dtype=float)).all())


def diverged_curves(records: list[Any], arm: str, metric: str) -> list[pd.Series]:
    """``arm``'s completed trials' curves of ``metric`` with a non-finite value, cut before the first one."""
    out = []
    for c in trial_curves(records, arm, metric, "COMPLETE"):
        ok = np.isfinite(c.to_numpy(dtype=float))
        if not ok.all():
            out.append(c.iloc[:int(ok.argmin())])
    return out


def no_curve_note(curves: dict[str, pd.DataFrame], metric: str) -> str:
    """``val/acc: no mean curve for a, b (their seeds logged it at no common step)``, or ""."""
    empty = [arm for arm, c in curves.items() if c.empty]
    if not empty:
        return ""
    return f"{metric}: no mean curve for {', '.join(empty)} (their seeds logged it at no common step)"


def plot_curves(records: list[Any], metrics: list[str], out_path: Path, order: list[str] | None = None,
                notes: list[str] | None = None) -> Path | None:
    """One subplot per metric that has curves; returns the PNG path or None if nothing to plot.
    ``notes`` gets a line per metric with arms that have no mean curve (:func:`no_curve_note`)."""
    arms = arm_order(records, order)
    per_metric = {m: (arm_curves(records, m, order),
                      {a: c for a in arms for c in [trial_curves(records, a, m, "PRUNED")] if c},
                      {a: c for a in arms for c in [diverged_curves(records, a, m)] if c})
                  for m in dict.fromkeys(metrics)}
    per_metric = {m: curves for m, curves in per_metric.items() if any(curves)}
    if notes is not None:
        notes += [note for m, (done, _, _) in per_metric.items() for note in [no_curve_note(done, m)] if note]
        notes += [f"{m}: {arm}: {len(c)} seed(s) logged a non-finite value (diverged): drawn dashed, not in the "
                  "mean" for m, (_, _, gone) in per_metric.items() for arm, c in gone.items()]
    if not per_metric:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from klear_lab.tracking import atomic_write

    fig, axes = plt.subplots(1, len(per_metric), figsize=(5.5 * len(per_metric), 4), squeeze=False)
    colors = {arm: f"C{i % 10}" for i, arm in enumerate(arms)}
    for ax, (metric, (curves, pruned, diverged)) in zip(axes[0], per_metric.items(), strict=False):
        for arm, c in curves.items():
            if c.empty:  # a legend entry saying so, no line
                ax.plot([], [], linestyle="none", color=colors[arm], label=f"{arm}: no mean (seeds share no step)")
                continue
            ax.plot(c["step"], c["mean"], marker="o", markersize=3, color=colors[arm],
                    label=f"{arm} (n={int(c['n'].max())})")
            ax.fill_between(c["step"], c["mean"] - c["std"], c["mean"] + c["std"], color=colors[arm],
                            alpha=0.2, linewidth=0)
        for kind, style, apart in (("pruned", ":", pruned), ("diverged", "--", diverged)):
            for arm, series in apart.items():
                for i, s in enumerate(series):
                    ax.plot(s.index, s.to_numpy(), linestyle=style, linewidth=1, marker="x", markersize=4,
                            color=colors[arm], label=f"{arm}: {kind} ({len(series)})" if i == 0 else None)
        ax.set_xlabel("step")
        ax.set_ylabel(metric)
        ax.set_title(f"{metric}: mean ± std across seeds")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out_path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    plt.close(fig)
    return out_path
