"""``deltas.png``: each arm's difference from the baseline, the paper's (per benchmark) beside ours."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from klear_lab.analysis.reproduce import Reproduction


def plot_deltas(rep: Reproduction, out_path: Path | str) -> None:
    """Left: the paper's Δ per benchmark (grouped bars). Right: our Δ of the objective with its 95 % CI."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = rep.arms
    x = np.arange(len(arms))
    fig, (left, right) = plt.subplots(1, 2, figsize=(max(9.0, 1.3 * len(arms) * 2), 4.2))
    benches = rep.analysis.benchmarks
    width = 0.8 / max(len(benches), 1)
    for i, bench in enumerate(benches):
        left.bar(x + (i - (len(benches) - 1) / 2) * width, arms[f"paper Δ {bench}"].fillna(0.0), width,
                 label=bench)
    left.set_title(f"paper: Δ vs {rep.analysis.baseline}")
    left.legend(fontsize=8)
    base = arms["baseline"].to_numpy(dtype=bool)  # Δ of the baseline with itself: no bar, no interval
    d = np.where(base, 0.0, arms["ours Δ"].to_numpy(dtype=float))
    lo = np.where(base, 0.0, np.nan_to_num(d - arms["ours Δ ci low"].to_numpy(dtype=float)))
    hi = np.where(base, 0.0, np.nan_to_num(arms["ours Δ ci high"].to_numpy(dtype=float) - d))
    colors = ["tab:gray" if not paper else "tab:blue" for paper in arms["in paper"]]
    right.bar(x, np.nan_to_num(d), 0.6, yerr=np.vstack([lo, hi]), capsize=4, color=colors)
    for xi, n, is_base in zip(x, arms["n"], base, strict=True):
        right.text(xi, 0.02, f"baseline\nn={n}" if is_base else f"n={n}", transform=right.get_xaxis_transform(),
                   ha="center", fontsize=7)
    right.set_title(f"ours ({rep.sweep.name}): Δ {rep.sweep.metric}, 95 % CI")
    for ax in (left, right):
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.set_xticks(x, [_short(a) for a in arms["arm"]], rotation=30, ha="right", fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(rep.analysis.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out_path, dpi=120, format="png")
    plt.close(fig)


def _short(name: str, limit: int = 18) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"

