"""Print the comparison table with Rich and say where the outputs are; write its ``table.csv``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from klear_lab.sweep.spec import SweepSpec


def print_table(df: pd.DataFrame, spec: SweepSpec, baseline: str | None, out_dir: Path,
                png: Path | None, console: Any = None, title: str | None = None, extra: tuple[str, ...] = ()) -> None:
    """One row per arm; best arm starred, notes under the table; where the CSV, markdown, PNG and W&B runs are."""
    from rich.markup import escape
    from rich.table import Table

    from klear_lab.console import make_console, shown_path
    from klear_lab.sweep.best import best_notes
    from klear_lab.sweep.compare_text import (
        cell,
        delta_cell,
        few_seeds_note,
        missing_baseline_note,
        one_batch_note,
        table_metrics,
        welch_cell,
    )

    console = console or make_console()
    names = table_metrics(spec.metric, spec.metrics)
    # every header is escaped: Rich reads "[bootstrap 95% CI]" as a markup tag and drops it
    rescored = title is not None
    table = Table(title=escape(title or f"sweep {spec.name}: {spec.metric} ({spec.direction}){versus(baseline)}"))
    table.add_column("arm", style="bold")
    for m in names:
        table.add_column(escape(m), justify="right")
    deltas = baseline is not None  # no baseline (no arm yet): no delta columns
    if deltas:
        table.add_column(escape(f"Δ {spec.metric} [bootstrap 95% CI]"), justify="right")
        table.add_column("Welch t 95% CI", justify="right")
    table.add_column("pruned/failed", justify="right")
    for _, row in df.iterrows():
        arm = escape(f"★ {row['arm']}" if row["best"] else row["arm"])  # axis values may hold brackets
        counts = f"{row['pruned']}/{row['failed']}"
        table.add_row(arm, *[cell(row, m) for m in names], *([delta_cell(row), welch_cell(row)] if deltas else []),
                      counts, style="green" if row["best"] else None)
    console.print(table)
    notes = [*extra, missing_baseline_note(df, baseline), *best_notes(df), few_seeds_note(df, spec.metric, baseline)]
    for note in [*notes, one_batch_note(spec.metric, spec.metrics) if len(df) else ""]:
        if note:
            console.print(escape(note), style="yellow")
    console.print(f"table: {shown_path(out_dir / 'table.csv')}  {shown_path(out_dir / 'table.md')}")
    if png or not rescored:  # a rescoring has one number per run: no curves to speak of
        console.print(f"curves: {shown_path(png) if png else 'none (no metrics.csv with them in the run dirs)'}")
    console.print(f"runs: {shown_path(spec.sweep_dir / 'runs')} (W&B offline runs inside; `wandb sync` them), "
                  f"W&B group {spec.wandb_group or spec.name}")


def versus(baseline: str | None) -> str:
    """The end of a table's title: ``, baseline lr=0.001``, or ``, no baseline`` (a tpe/random sweep with no
    trial yet), never ``baseline None``."""
    return f", baseline {baseline}" if baseline is not None else ", no baseline"


def print_run_notes(console: Any, curve_notes: list[str], never: list[str]) -> None:
    """Notes after the table: arms with no mean curve, table metrics no finished trial logged."""
    from rich.markup import escape

    for note in curve_notes:
        console.print(f"note: curves: {escape(note)}", style="yellow")
    if never:  # with plugins, rl/ and reward/ names cannot be checked before the runs
        columns = "its column is" if len(never) == 1 else "their columns are"
        console.print(f"note: no finished trial logged {escape(', '.join(never))}: {columns} "
                      "empty; check the names against the runs' metrics.csv")


def write_csv(df: pd.DataFrame, path: Path, baseline: str | None) -> None:
    """``table.csv``; without a baseline, no delta columns (empty), as in ``table.md`` and the Rich table."""
    from klear_lab.sweep.compare import DELTA_COLUMNS
    from klear_lab.tracking import atomic_write

    table = df if baseline is not None else df.drop(columns=list(DELTA_COLUMNS))
    atomic_write(path, lambda tmp: table.to_csv(tmp, index=False))
