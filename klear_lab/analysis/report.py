"""Write a reproduction: ``arms.csv``, ``claims.csv``, ``report.md``, ``deltas.png`` and, when the
analysis maps paper benchmarks to metrics of the sweep, ``benchmarks.csv``; print it with Rich.

Outputs go to ``SWEEP_DIR/reproduce/ANALYSIS_NAME/`` unless told otherwise; files are written to a
temporary name and renamed, so an interrupted report never leaves half a file.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pandas as pd

from klear_lab.analysis.reproduce import Reproduction, fix_config
from klear_lab.tracking import atomic_write


def num(value: float, signed: bool = False, decimals: int | None = None) -> str:
    """``0.813``, ``+0.022``; ``–`` for a missing value; fixed ``decimals`` for paper numbers."""
    if value is None or math.isnan(value):
        return "–"
    if decimals is not None:
        return f"{value:+.{decimals}f}" if signed else f"{value:.{decimals}f}"
    return f"{value:+.4g}" if signed else f"{value:.4g}"


def paper_decimals(rep: Reproduction) -> int:
    """Papers print fractions with 3 decimals and percentages with 2 (0.800, 45.00); no numbers: as fractions."""
    values = [abs(v) for row in rep.analysis.paper.values() for v in row if not math.isnan(v)]
    return 3 if not values or max(values) < 1.5 else 2


FRACTION = re.compile(r"(acc|acc_[a-z0-9]+|pass_at_k|gain|gain_ci95_(low|high))")
"""The last part of a metric name that holds a fraction of problems (val/acc, val/aime24/acc_last5...)."""


def ours_scale(rep: Reproduction, metric: str) -> float:
    """100 where the paper prints percentages (45.00) and ``metric`` is a fraction (0.45), so ours reads
    on the paper's scale; else 1. Tables and the markdown show it; the CSVs keep the logged values."""
    return 100.0 if paper_decimals(rep) == 2 and FRACTION.fullmatch(metric.rpartition("/")[2]) else 1.0


def unit(scale: float) -> str:
    return " (%)" if scale == 100.0 else ""


def interval(row: Any, scale: float = 1.0) -> str:
    """``+0.031 [+0.012, +0.050]`` from a row's ``ours Δ`` columns (times ``scale``)."""
    d, lo, hi = (row[k] * scale for k in ("ours Δ", "ours Δ ci low", "ours Δ ci high"))
    if math.isnan(d):
        return "–"
    if math.isnan(lo):
        return f"{d:+.4g} [no interval]"
    return f"{d:+.4g} [{lo:+.3g}, {hi:+.3g}]"


def ours(row: Any, scale: float = 1.0) -> str:
    """``0.8575 ± 0.011 (n=2)`` (times ``scale``)."""
    if math.isnan(row["ours mean"]):
        return "–"
    std = "" if math.isnan(row["ours std"]) else f" ± {row['ours std'] * scale:.2g}"
    return f"{row['ours mean'] * scale:.4g}{std} (n={row['n']})"


# a claim's seeds with a finite value of each side: "2/0" is 2 of `better` and none of `than`
SEEDS = "seeds (better/than)"


def arm_cells(rep: Reproduction, row: Any) -> list[str]:
    dec = paper_decimals(rep)
    paper = [("–" if not row["in paper"] or math.isnan(row[f"paper {b}"])  # not reported: no Δ either
              else num(row[f"paper {b}"], decimals=dec) if row["baseline"]
              else f"{num(row[f'paper {b}'], decimals=dec)} ({num(row[f'paper Δ {b}'], True, dec)})")
             for b in rep.analysis.benchmarks]
    name = f"{row['arm']} (baseline)" if row["baseline"] else row["arm"]
    scale = ours_scale(rep, rep.sweep.metric)
    return [name, row["sweep arm"] or "–", *paper, ours(row, scale),
            "baseline" if row["baseline"] else interval(row, scale)]


def metric_cell(row: Any, scale: float = 1.0) -> str:
    """``val/b/acc (%)``, ``val/acc_drawdown (lower is better)``: the metric a claim's row is judged on, in
    the unit shown, saying so where lower is better; ``–`` for none (a claim on a benchmark left unmapped)."""
    if not row["metric"]:
        return "–"
    return row["metric"] + unit(scale) + (" (lower is better)" if row["direction"] == "lower" else "")


def claims_name_metrics(rep: Reproduction) -> bool:
    """Whether a claim is judged on another metric than the objective (one naming a ``benchmark:``): the
    claims table then has a ``metric`` column; else every row is on the objective, which the report names once."""
    return any(claim.benchmark for claim in rep.analysis.claims)


def claim_cells(rep: Reproduction, row: Any) -> list[str]:
    paper = [num(row[f"paper Δ {b}"], True, paper_decimals(rep)) for b in rep.analysis.benchmarks]
    scale = ours_scale(rep, row["metric"] or rep.sweep.metric)
    metric = [metric_cell(row, scale)] if claims_name_metrics(rep) else []
    return [row["claim"], *paper, *metric, interval(row, scale), f"{row['n better']}/{row['n than']}", row["verdict"]]


def arm_header(rep: Reproduction) -> list[str]:
    scale = unit(ours_scale(rep, rep.sweep.metric))
    return ["arm", "sweep arm", *[f"paper {b} (Δ)" for b in rep.analysis.benchmarks],
            f"ours {rep.sweep.metric}{scale}", f"ours Δ vs {rep.analysis.baseline}{scale} [95% CI]"]


def claim_header(rep: Reproduction) -> list[str]:
    """With a ``metric`` column (:func:`claims_name_metrics`) the unit is in its cells, else in this header."""
    named = claims_name_metrics(rep)
    scale = "" if named else unit(ours_scale(rep, rep.sweep.metric))
    return ["paper's claim", *[f"paper Δ {b}" for b in rep.analysis.benchmarks], *(["metric"] if named else []),
            f"ours Δ{scale} [95% CI]", SEEDS, "verdict"]


def benchmark_header() -> list[str]:
    return ["paper's claim", "benchmark", "metric", "paper Δ", "ours Δ [95% CI]", SEEDS, "verdict"]


def benchmark_cells(rep: Reproduction, row: Any) -> list[str]:
    scale = ours_scale(rep, row["metric"])
    return [row["claim"], row["benchmark"], metric_cell(row, scale),
            num(row["paper Δ"], True, paper_decimals(rep)), interval(row, scale),
            f"{row['n better']}/{row['n than']}", row["verdict"]]


def progress_line(rep: Reproduction, code: str = "") -> str:
    """``4 of 6 trials complete (grid points x seeds); 2 not finished (clip=cispo seed=0, ...): run the
    sweep again: klear-lab sweep SPEC``: a partial sweep's "4/4" or "4/7" read as complete, or counted a
    retry as a trial of its own. Points whose trials failed on a config or data error, or diverged, are
    counted apart and not sent to a rerun (it would fail them again): ``...; 2 failed on a config or data
    error, or diverged (clip=cispo seed=0, ...): fix the config first: ...``. ``code``: a markdown code
    quote around the command and the trial logs' directory."""
    line = f"{rep.n_complete} of {rep.n_trials} trials complete (grid points x seeds)"
    # finished without a result: not rerun
    if pruned := rep.n_trials - rep.n_complete - len(rep.unfinished) - len(rep.failed):
        line += f"; {pruned} pruned"
    if rep.failed:
        points = ", ".join(rep.failed[:8]) + (" ..." if len(rep.failed) > 8 else "")
        line += (f"; {len(rep.failed)} failed on a config or data error, or diverged ({points}): "
                 f"{fix_config(rep.failure, rep.sweep.sweep_dir / 'trials', code)}")
    if not rep.unfinished:
        return line
    points = ", ".join(rep.unfinished[:8]) + (" ..." if len(rep.unfinished) > 8 else "")
    logs = (f", {len(rep.crashed)} of them failed (see the trial logs in {code}{rep.sweep.sweep_dir / 'trials'}"
            f"{code})" if rep.crashed else "")
    return f"{line}; {len(rep.unfinished)} not finished ({points}){logs}: run the sweep again: {code}{rep.rerun}{code}"


def to_markdown(rep: Reproduction) -> str:
    """The report: provenance, the arms table, the claims table and the claims per benchmark."""
    a, s = rep.analysis, rep.sweep
    lines = [f"# {a.title}", "", f"- paper numbers: {a.source or '(no source given)'}",
             f"- analysis spec: `{a.path}`", f"- sweep: `{s.name}` (`{s.path}`), {progress_line(rep, '`')}",
             f"- {rep.scale.line}",
             f"- ours: `{s.metric}` ({s.direction}), mean ± std across seeds; "
             "Δ vs the baseline arm with a Welch t 95 % interval over seeds"
             + ("; fractions shown in percent, as the paper prints them (the CSVs keep fractions)"
                if ours_scale(rep, s.metric) == 100.0 else ""), ""]
    lines += md_table(arm_header(rep), [arm_cells(rep, r) for _, r in rep.arms.iterrows()])
    if not rep.claims.empty:
        lines += ["", "## The paper's claims", ""]
        lines += md_table(claim_header(rep), [claim_cells(rep, r) for _, r in rep.claims.iterrows()])
    if not rep.benchmarks.empty:
        mapped = ", ".join(f"{bench}: `{metric}`" + (" (lower is better)" if rep.directions.get(bench) == "lower"
                                                     else "") for bench, metric in rep.metrics.items())
        stay = " but for a claim on one benchmark, on its metric" if claims_name_metrics(rep) else ""
        lines += ["", "## The paper's claims per benchmark", "",
                  f"Ours on the metric the sweep logs for each benchmark ({mapped}); the verdicts above stay on "
                  f"`{s.metric}`{stay}.", ""]
        lines += md_table(benchmark_header(), [benchmark_cells(rep, r) for _, r in rep.benchmarks.iterrows()])
    return "\n".join(lines) + "\n"


def md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    return [line(head), "|" + "---|" * len(head), *[line(cells) for cells in rows]]


def print_reproduction(rep: Reproduction, out_dir: Path, png: Path | None, console: Any = None) -> None:
    """The tables with Rich; reproduced claims green, contradicted red."""
    from rich.markup import escape
    from rich.table import Table

    from klear_lab.console import make_console, shown_path

    console = console or make_console()
    title = f"{rep.analysis.title} — sweep {rep.sweep.name} ({rep.n_complete}/{rep.n_trials} trials)"
    table = Table(title=escape(title))
    for i, col in enumerate(arm_header(rep)):
        table.add_column(escape(col), justify="left" if i < 2 else "right")
    for _, row in rep.arms.iterrows():
        table.add_row(*[escape(c) for c in arm_cells(rep, row)], style=None if row["in paper"] else "dim")
    console.print(table)
    console.print(escape(rep.scale.line), style="yellow" if rep.scale.caution else None)
    if rep.n_complete < rep.n_trials:
        console.print(escape(progress_line(rep)), style="yellow")
    if not rep.claims.empty:
        console.print(_verdict_table("the paper's claims on this sweep", claim_header(rep), 1,
                                     [claim_cells(rep, r) for _, r in rep.claims.iterrows()]))
    if not rep.benchmarks.empty:
        console.print(_verdict_table("the paper's claims per benchmark", benchmark_header(), 3,
                                     [benchmark_cells(rep, r) for _, r in rep.benchmarks.iterrows()]))
    tables = "  ".join(shown_path(out_dir / name) for name in written_tables(rep))
    console.print(escape(f"report: {shown_path(out_dir / 'report.md')}  tables: {tables}"))
    console.print(escape(f"figure: {shown_path(png)}") if png else "figure: none (no completed trials)")


def _verdict_table(title: str, header: list[str], n_left: int, rows: list[list[str]]) -> Any:
    """A Rich table whose last cell is a verdict: reproduced rows green, contradicted red; the first
    ``n_left`` columns are text (left), the rest numbers. Every cell is escaped: "[95% CI]" and
    "[no interval]" are not style tags."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=title)
    for i, col in enumerate(header):  # the verdict folds: a command in it was cut to "…" at the terminal's width
        table.add_column(escape(col), justify="left" if i < n_left else "right",
                         overflow="fold" if i == len(header) - 1 else "ellipsis")
    for cells in rows:
        style = {"reproduced": "green", "contradicted": "red"}.get(cells[-1])
        table.add_row(*[escape(c) for c in cells], style=style)
    return table


def written_tables(rep: Reproduction) -> list[str]:
    """The CSV files a reproduction writes: ``benchmarks.csv`` only when benchmarks are compared."""
    return ["arms.csv", "claims.csv", *(["benchmarks.csv"] if not rep.benchmarks.empty else [])]


def write_reproduction(rep: Reproduction, out_dir: Path, console: Any = None) -> Path | None:
    """Write the CSVs, markdown and figure (each atomically), then print; returns the PNG path."""
    from klear_lab.analysis.figure import plot_deltas

    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(out_dir / "arms.csv", lambda p: rep.arms.to_csv(p, index=False))
    atomic_write(out_dir / "claims.csv", lambda p: _claims_frame(rep).to_csv(p, index=False))
    _write_benchmarks(rep, out_dir / "benchmarks.csv")
    atomic_write(out_dir / "report.md", lambda p: Path(p).write_text(to_markdown(rep)))
    png = None
    if rep.arms["n"].sum() > 0:
        png = out_dir / "deltas.png"
        atomic_write(png, lambda p: plot_deltas(rep, p))
    print_reproduction(rep, out_dir, png, console)
    return png


def _write_benchmarks(rep: Reproduction, path: Path) -> None:
    """``benchmarks.csv``, or no such file: one left by an earlier run that mapped benchmarks would
    sit beside tables it does not belong to."""
    if rep.benchmarks.empty:
        path.unlink(missing_ok=True)
    else:
        atomic_write(path, lambda p: rep.benchmarks.to_csv(p, index=False))


def _claims_frame(rep: Reproduction) -> pd.DataFrame:
    return rep.claims if not rep.claims.empty else pd.DataFrame(columns=["claim", "verdict"])
