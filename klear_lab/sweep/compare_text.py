"""The comparison table as text: its metric columns, the markdown table (``table.md``), each cell, and the
notes under the table (a baseline never sampled, too few seeds, one-batch training metrics).

``render.py`` prints the same cells and notes with Rich.
"""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from klear_lab.sweep.best import best_notes

if TYPE_CHECKING:
    from klear_lab.sweep.compare import TrialRecord
    from klear_lab.sweep.spec import SweepSpec


def table_metrics(objective: str, metrics: list[str]) -> list[str]:
    """The table's metric columns: the objective first; a metric listed twice is one column."""
    return list(dict.fromkeys([objective, *metrics]))


def to_markdown(df: pd.DataFrame, objective: str, metrics: list[str], baseline: str | None,
                extra: tuple[str, ...] = ()) -> str:
    """GitHub markdown: the best arm in bold with a star, deltas with their bootstrap and Welch intervals
    (no delta columns without a baseline: a sweep with no arm yet); ``extra`` notes first (where the baseline
    came from, arms that never trained: :func:`table_notes`)."""
    names = table_metrics(objective, metrics)
    deltas = [f"Δ {objective} vs {baseline} [bootstrap 95% CI]", "Welch t 95% CI"] if baseline is not None else []
    head = ["arm", *names, *deltas, "pruned", "failed"]
    lines = ["| " + " | ".join(h.replace("|", "\\|") for h in head) + " |", "|" + "---|" * len(head)]
    for _, row in df.iterrows():
        arm = f"**{row['arm']}** ★" if row["best"] else row["arm"]
        cells = [arm, *[cell(row, m) for m in names], *([delta_cell(row), welch_cell(row)] if deltas else []),
                 str(row["pruned"]), str(row["failed"])]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")  # an axis value may hold "|"
    notes = [*extra, missing_baseline_note(df, baseline), *best_notes(df), few_seeds_note(df, objective, baseline),
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
    if math.isnan(lo):  # which case: ``compare.no_interval_reason``
        return f"{d:+.4g} ({row.get('delta note') or 'under 2 seeds or no spread'}: no interval)"
    if abs(d) <= 1e-6 * max(abs(lo), abs(hi)):  # float32-logged metrics: equal means differ by ~1e-8
        d = 0.0
    return f"{d:+.4g} [{lo:+.3g}, {hi:+.3g}]"


def welch_cell(row: Any) -> str:
    """``[-0.21, +0.27]``; ``–`` for the baseline, or when an arm has under 2 seeds or no spread."""
    if row["baseline"] or math.isnan(row["welch ci low"]):
        return "–"
    return f"[{row['welch ci low']:+.3g}, {row['welch ci high']:+.3g}]"


def missing_baseline_note(df: pd.DataFrame, baseline: str | None) -> str:
    """A line under the table when the baseline arm has no row (a tpe/random sampler never drew it), or no
    finished trial (every delta was "–" with no word why)."""
    if baseline is None:
        return ""
    if baseline not in set(df["arm"]):  # the spec's `baseline:` (a --baseline naming no sampled arm is refused)
        return (f"baseline arm {baseline} was never sampled: no deltas (add trials, or name a sampled arm with "
                "`compare --baseline ARM` or in the spec's `baseline:`)")
    row = df[df["arm"] == baseline].iloc[0]
    if row["n"] > 0:
        return ""
    ended = [f"{int(row.get(state, 0) or 0)} {state}" for state in ("failed", "pruned") if row.get(state, 0)]
    why = f"{' and '.join(ended)} (see the trial logs under trials/)" if ended else "none has finished yet"
    return (f"baseline arm {baseline} has no finished trial: {why}, so no deltas (rerun the sweep, or name "
            "another arm with --baseline)")


def table_notes(spec: SweepSpec, baseline: str | None, records: list[TrialRecord]) -> tuple[str, ...]:
    """The notes that open the table's: where its baseline came from, and the arms with trials that never
    updated the policy."""
    return tuple(n for n in (baseline_note(spec, baseline), *untrained_notes(records)) if n)


def baseline_note(spec: SweepSpec, baseline: str | None) -> str:
    """Where the baseline came from, when that is not plain: ``--baseline``; a sweep directory's frozen spec
    (``compare SWEEP_DIR``: the spec the sweep ran); or a spec file edited since the sweep ran
    (``compare SPEC`` reads it as it is now), which names the baseline the sweep ran with. Both forms write
    ``SWEEP_DIR/compare/``, so the table says which it is."""
    if baseline is None:
        return ""
    if spec.baseline_from:
        return f"baseline {baseline}: from {spec.baseline_from}"
    path = Path(spec.path)
    if path.name == "spec.yaml" and (path.parent / "sweep.json").is_file():
        how = "`baseline:` of" if spec.baseline is not None else "the first arm (no `baseline:` in"
        return f"baseline {baseline}: {how} {path}, the spec the sweep ran" + ("" if spec.baseline is not None else ")")
    ran = _frozen_baseline(spec)
    if ran is None:
        return ""
    return (f"baseline {baseline}: `baseline:` of {path} as it is now; the sweep ran with baseline {ran} "
            f"({spec.sweep_dir / 'spec.yaml'}; `klear-lab compare {spec.sweep_dir}` uses that one)")


def _frozen_baseline(spec: SweepSpec) -> str | None:
    """The baseline in the sweep directory's frozen spec when it differs from ``spec``'s, else None."""
    from klear_lab.sweep.grid import grid_arms, resolve_baseline
    from klear_lab.sweep.spec import load_spec

    frozen = spec.sweep_dir / "spec.yaml"
    try:
        ran = load_spec(frozen)
        if ran.baseline == spec.baseline:
            return None
        return str(resolve_baseline(ran, [a.label for a in grid_arms(ran)] if ran.sampler == "grid" else []))
    except Exception:  # noqa: BLE001 - no sweep run yet, or a frozen spec that no longer reads: nothing to say
        return None


def never_updated(record: TrialRecord) -> bool:
    """Whether a completed RL trial never updated its policy: rollout steps but no optimizer step (every group
    filtered out, ``rl/trained_groups`` 0 at each step), as the run's own warning says. Its evaluations are of
    the starting model. Read from the trial's metrics, else its run's ``summary.json``."""
    metrics = record.metrics
    if "train/steps" not in metrics and record.run_dir:
        with contextlib.suppress(OSError, ValueError):  # no summary: a run from before, or a moved one
            metrics = {**json.loads((Path(record.run_dir) / "summary.json").read_text()), **metrics}
    steps, rollouts = metrics.get("train/steps"), metrics.get("rl/rollout_steps")
    return record.state == "COMPLETE" and steps == 0 and bool(rollouts)


def untrained_notes(records: list[TrialRecord]) -> list[str]:
    """``arm X: 2 of 2 trials never updated the policy (rl/trained_groups 0): their val/acc is the starting
    model's``, one per arm with such trials (counted among its completed ones)."""
    done: dict[str, list[TrialRecord]] = {}
    for r in records:
        if r.state == "COMPLETE":
            done.setdefault(r.arm, []).append(r)
    notes = []
    for arm, mine in done.items():
        if n := sum(map(never_updated, mine)):
            notes.append(f"arm {arm}: {n} of {len(mine)} trial(s) never updated the policy (rl/trained_groups 0 at "
                         "every rollout step; see the trial logs): their evaluations are the starting model's")
    return notes
