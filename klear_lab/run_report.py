"""What the command line prints of a finished run: its main metrics, and where its files are (whole, for copying)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from klear_lab.console import make_console, shown_path

if TYPE_CHECKING:
    from klear_lab.run import RunResult


def print_result(result: RunResult) -> None:
    """What a finished ``train``, ``resume`` or ``eval`` prints: its main metrics and where its files are."""
    from rich.table import Table

    console = make_console()
    table = Table(show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key in sorted(result.metrics):
        if key.startswith(("val/", "train/loss", "perf/", "rl/", "reward/")) and key.count("/") <= 2:
            table.add_row(key, f"{result.metrics[key]:.4g}")
    run_dir = Path(shown_path(result.run_dir))
    console.print(f"run finished: {run_dir}", soft_wrap=True)  # paths whole in a pipe, to copy or grep
    console.print(table)
    console.print(f"run directory : {run_dir}", soft_wrap=True)
    console.print(f"resolved config: {run_dir / 'config.yaml'}", soft_wrap=True)
    console.print(f"metrics CSV   : {run_dir / 'csv' / 'metrics.csv'}", soft_wrap=True)
    console.print(f"summary JSON  : {run_dir / 'summary.json'}", soft_wrap=True)
    if result.wandb_dir:
        console.print(f"W&B run       : {wandb_upload(Path(shown_path(result.wandb_dir)))}", soft_wrap=True)


def wandb_upload(run_dir: Path) -> str:
    """The W&B run directory, and for an offline run the command that uploads it: after a resume, every
    attempt's directory in order (the last one alone holds only the steps since the resume)."""
    if not run_dir.name.startswith("offline-run-"):
        return str(run_dir)
    attempts = sorted(run_dir.parent.glob("offline-run-*"))
    if len(attempts) <= 1:
        return f"{run_dir}  (offline: upload with `wandb sync {run_dir}`)"
    return (f"{run_dir}  (offline, the last of {len(attempts)} attempts of one W&B run: upload them all, in order, "
            f"with `wandb sync {run_dir.parent}/offline-run-*`)")
