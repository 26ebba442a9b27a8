"""``deltas.png``: each arm's difference from the baseline, the paper's (per benchmark) beside ours.

Ours is drawn on the report's scale (``report.ours_scale``: percentage points where the paper prints
percentages and the objective is a fraction), so both panels read in the same unit. Our panel has the
arms the sweep ran: a paper arm with no sweep arm is named under the panel, not drawn as a 0 bar; an
arm with a Δ but no interval (one seed) is hatched and labelled ``no CI``, not drawn as an exact bar.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from klear_lab.analysis.report import ours_scale, paper_decimals
from klear_lab.analysis.reproduce import Reproduction
from klear_lab.analysis.verdicts import printed


@dataclass(frozen=True)
class OurBars:
    """Our panel: one bar per arm the sweep ran, on the report's scale."""

    arms: list[str]
    delta: np.ndarray  # Δ x scale; 0 for the baseline; NaN where the arm has no result (no bar)
    err: np.ndarray  # (2, n arms): below and above the bar; 0 where there is no interval
    no_ci: np.ndarray  # a Δ without an interval (one seed, or no spread): hatched, "no CI"
    notes: list[str]  # under each bar: "n=2", "baseline\nn=2", "n=1\nno CI", "n=0\nno result"
    in_paper: list[bool]
    not_run: list[str]  # paper arms the sweep has no arm for: left out
    scale: float


def our_bars(rep: Reproduction) -> OurBars:
    """The values our panel draws (a pure function of ``rep``)."""
    ran = rep.arms["sweep arm"].astype(str) != ""
    arms = rep.arms[ran]
    scale = ours_scale(rep, rep.sweep.metric)
    base = arms["baseline"].to_numpy(dtype=bool)  # Δ of the baseline with itself: no interval
    d = arms["ours Δ"].to_numpy(dtype=float) * scale
    lo = arms["ours Δ ci low"].to_numpy(dtype=float) * scale
    hi = arms["ours Δ ci high"].to_numpy(dtype=float) * scale
    d = np.where(base, 0.0, d)
    no_ci = ~base & ~np.isnan(d) & np.isnan(lo)
    err = np.vstack([np.where(base, 0.0, np.nan_to_num(d - lo)), np.where(base, 0.0, np.nan_to_num(hi - d))])
    notes = [f"baseline\nn={n}" if b else f"n={n}\nno result" if math.isnan(v) else
             f"n={n}\nno CI" if c else f"n={n}" for n, b, v, c in zip(arms["n"], base, d, no_ci, strict=True)]
    return OurBars(list(arms["arm"]), d, err, no_ci, notes, list(arms["in paper"].astype(bool)),
                   list(rep.arms.loc[~ran, "arm"]), scale)


def draw_deltas(rep: Reproduction):
    """Left: the paper's Δ per benchmark (grouped bars). Right: our Δ of the objective with its 95 % CI."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ours = our_bars(rep)
    paper = rep.arms[rep.arms["in paper"].astype(bool)]
    width_arms = max(len(paper), len(ours.arms), 1)
    fig, (left, right) = plt.subplots(1, 2, figsize=(max(9.0, 1.3 * width_arms * 2), 4.2))
    benches = [bench for bench in rep.analysis.benchmarks if printed(rep.analysis, bench)]  # a null column: no slot
    width = 0.8 / max(len(benches), 1)
    xp = np.arange(len(paper))
    for i, bench in enumerate(benches):  # a benchmark the paper does not report for an arm: no bar
        left.bar(xp + (i - (len(benches) - 1) / 2) * width, paper[f"paper Δ {bench}"].to_numpy(dtype=float),
                 width, label=bench)
    points = " (percentage points)" if paper_decimals(rep) == 2 else ""
    left.set_title(f"paper: Δ vs {rep.analysis.baseline}{points}")
    left.set_ylabel(f"Δ{points}")
    left.set_xticks(xp, [_short(a) for a in paper["arm"]], rotation=30, ha="right", fontsize=8)
    left.legend(fontsize=8)
    _draw_ours(right, rep, ours)
    for ax in (left, right):
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(rep.analysis.title, fontsize=10)
    fig.tight_layout()
    return fig


def _draw_ours(ax, rep: Reproduction, ours: OurBars) -> None:
    x = np.arange(len(ours.arms))
    colors = ["tab:blue" if paper else "tab:gray" for paper in ours.in_paper]
    bars = ax.bar(x, np.nan_to_num(ours.delta), 0.6, yerr=ours.err, capsize=4, color=colors)
    for patch, hatch in zip(bars.patches, ours.no_ci, strict=True):
        if hatch:
            patch.set_hatch("//")
            patch.set_edgecolor("black")
    for xi, note in zip(x, ours.notes, strict=True):
        ax.text(xi, 0.02, note, transform=ax.get_xaxis_transform(), ha="center", fontsize=7)
    points = " (percentage points)" if ours.scale == 100.0 else ""
    ax.set_title(f"ours ({rep.sweep.name}): Δ {rep.sweep.metric}{points}, 95 % CI"
                 + ("; hatched: no CI" if ours.no_ci.any() else ""))
    ax.set_ylabel(f"Δ {rep.sweep.metric}{points}")
    ax.set_xticks(x, [_short(a) for a in ours.arms], rotation=30, ha="right", fontsize=8)
    if ours.not_run:
        ax.set_xlabel(f"not in the sweep (no bar): {', '.join(ours.not_run)}", fontsize=8)


def plot_deltas(rep: Reproduction, out_path: Path | str) -> None:
    """Draw :func:`draw_deltas` to a PNG at ``out_path``."""
    fig = draw_deltas(rep)  # selects the Agg backend before pyplot is imported here
    import matplotlib.pyplot as plt

    fig.savefig(out_path, dpi=120, format="png")
    plt.close(fig)


def _short(name: str, limit: int = 18) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"
