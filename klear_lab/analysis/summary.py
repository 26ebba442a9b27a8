"""The cross-analysis summary of ``klear-lab reproduce``: one line per paper claim, where it was tested (the
sweep, and the scale its runs had: :mod:`klear_lab.analysis.scale`) and what came out."""

from __future__ import annotations

import math
from typing import Any

from klear_lab.analysis.report import SEEDS, interval, md_table, metric_cell, ours_scale
from klear_lab.analysis.reproduce import Reproduction


def summary_interval(rep: Reproduction, row: Any) -> str:
    """A claim's interval on its paper's scale, saying so when in percentage points."""
    scale = ours_scale(rep, row["metric"] or rep.sweep.metric)
    return interval(row, scale) + (" pp" if scale == 100.0 and not math.isnan(row["ours Δ"]) else "")


def summary_claim(rep: Reproduction, row: Any) -> str:
    """The claim, naming the metric it was judged on where that is not the sweep's objective (a claim naming a
    ``benchmark:``: ``GPPO is more stable than CISPO, on val/acc_drawdown (lower is better)``)."""
    if row["metric"] == rep.sweep.metric or not row["metric"]:  # none: a benchmark this entry leaves unmapped
        return row["claim"]
    return f"{row['claim']}, on {metric_cell(row)}"


SUMMARY_HEADER = ["table / figure", "claim", "sweep", "ours on", "ours Δ [95% CI]", SEEDS, "verdict"]


def tested_claims(reps: list[Reproduction]) -> int:
    """Claims that got an interval (a test at 95 %): not those without a result or under 2 seeds."""
    return sum(int(rep.claims["ours Δ ci low"].notna().sum()) for rep in reps if not rep.claims.empty)


def multiplicity_note(n_claims: int) -> str:
    """Each verdict is a 95 % test of its own; over many claims, one decided by chance is expected."""
    if n_claims < 2:
        return ""
    return (f"{n_claims} claims with an interval, each tested at 95 % with no correction for multiple "
            "comparisons: among claims with no real difference, about 1 in 20 is still called reproduced or "
            "contradicted.")


def summary_markdown(reps: list[Reproduction], skipped: list[str]) -> str:
    """One line per paper claim across analyses: where it was tested and what came out."""
    rows = [[rep.analysis.title, summary_claim(rep, row), f"`{rep.sweep.name}`", rep.scale.short,
             summary_interval(rep, row), f"{row['n better']}/{row['n than']}", row["verdict"]]
            for rep in reps for _, row in rep.claims.iterrows()]
    lines = ["# The paper's claims on this machine's sweeps", ""]
    lines += md_table(SUMMARY_HEADER, rows)
    if note := multiplicity_note(tested_claims(reps)):
        lines += ["", note]
    if skipped:
        lines += ["", "Not run yet: " + ", ".join(f"`{name}`" for name in skipped)]
    return "\n".join(lines) + "\n"


def print_summary(reps: list[Reproduction], skipped: list[str], console: Any = None) -> None:
    """The summary as a Rich table (reproduced green, contradicted red)."""
    from rich.markup import escape
    from rich.table import Table

    from klear_lab.console import make_console

    console = console or make_console()
    table = Table(title="the paper's claims on this machine's sweeps")
    for col in SUMMARY_HEADER:
        table.add_column(escape(col))  # "[95% CI]" is not a style: Rich would drop it
    for rep in reps:
        for _, row in rep.claims.iterrows():
            style = {"reproduced": "green", "contradicted": "red"}.get(row["verdict"])
            table.add_row(escape(rep.analysis.title), escape(summary_claim(rep, row)), escape(rep.sweep.name),
                          escape(rep.scale.short),
                          escape(summary_interval(rep, row)),  # "[no interval]" is not a style tag either
                          f"{row['n better']}/{row['n than']}", escape(row["verdict"]), style=style)
    console.print(table)
    if note := multiplicity_note(tested_claims(reps)):
        console.print(escape(note))
    if skipped:
        console.print("not run yet: " + ", ".join(skipped))
