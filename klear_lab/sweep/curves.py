"""Metric curves per arm: mean across seeds over optimizer steps, with a ±std band.

Reads each trial's ``RUN_DIR/csv/metrics.csv`` (or ``RUN_DIR/metrics.csv``): Lightning's
CSVLogger, a ``step`` column and one column per metric, rows sparse. Runs whose directory is not
on this machine (workers on other machines) are skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd


def read_curve(run_dir: str | None, metric: str) -> pd.Series | None:
    """``metric`` indexed by step (last value per step), or None when absent."""
    if not run_dir:
        return None
    candidates = [Path(run_dir) / "csv" / "metrics.csv", Path(run_dir) / "metrics.csv"]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        return None
    df = pd.read_csv(path)
    if metric not in df.columns:
        return None
    x = "step" if "step" in df.columns else None
    rows = df[[c for c in (x, metric) if c]].dropna(subset=[metric])
    if rows.empty:
        return None
    steps = rows[x] if x else pd.Series(range(len(rows)), index=rows.index)
    return pd.Series(rows[metric].to_numpy(), index=steps.to_numpy()).groupby(level=0).last()


def arm_curves(records: list[Any], metric: str, order: list[str] | None = None) -> dict[str, pd.DataFrame]:
    """Arm -> DataFrame(step, mean, std, n) over its finished trials' curves."""
    out: dict[str, pd.DataFrame] = {}
    arms = list(order or []) + sorted({r.arm for r in records} - set(order or []))
    for arm in arms:
        series = [s for r in records if r.arm == arm and r.state in ("COMPLETE", "PRUNED")
                  for s in [read_curve(r.run_dir, metric)] if s is not None]
        if not series:
            continue
        table = pd.concat(series, axis=1)
        out[arm] = pd.DataFrame({"step": table.index, "mean": table.mean(axis=1).to_numpy(),
                                 "std": table.std(axis=1, ddof=1).fillna(0.0).to_numpy(),
                                 "n": table.count(axis=1).to_numpy()})
    return out


def plot_curves(records: list[Any], metrics: list[str], out_path: Path, order: list[str] | None = None,
                ) -> Path | None:
    """One subplot per metric that has curves; returns the PNG path or None if nothing to plot."""
    per_metric = {m: c for m in dict.fromkeys(metrics) for c in [arm_curves(records, m, order)] if c}
    if not per_metric:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from klear_lab.tracking import atomic_write

    fig, axes = plt.subplots(1, len(per_metric), figsize=(5.5 * len(per_metric), 4), squeeze=False)
    for ax, (metric, curves) in zip(axes[0], per_metric.items(), strict=False):
        for arm, c in curves.items():
            (line,) = ax.plot(c["step"], c["mean"], marker="o", markersize=3,
                              label=f"{arm} (n={int(c['n'].max())})")
            ax.fill_between(c["step"], c["mean"] - c["std"], c["mean"] + c["std"], color=line.get_color(),
                            alpha=0.2, linewidth=0)
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
