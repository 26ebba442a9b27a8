"""A paper table next to a sweep's results, and a verdict on each of the paper's claims.

The paper reports one benchmark score per arm; a sweep reports its objective per trial (several
seeds per arm). Neither scale is the other's, so the comparison is about *differences*: each
arm's delta against the baseline arm, the paper's per benchmark and ours with a Welch t 95 %
interval over seeds (``klear_lab.stats``). A claim "A beats B" is reproduced, contradicted or
inconclusive by that interval, in the direction of the metric it is judged on
(:mod:`klear_lab.analysis.verdicts`). A claim with no result says why: an arm the sweep does not have,
one whose seeds have not finished (with the command that runs them), or one whose seeds failed on a
config or data error, or diverged, which a rerun would repeat (as ``klear-lab sweep`` says: fix the
config first; the trial logs named).

A sweep's progress is counted in grid points x seeds, the trials it plans: an interrupted trial and
its queued retry are one point, and the points not finished yet are listed (``unfinished``), apart
from those whose latest trial failed on a config or data error, or diverged (``failed``: not rerun).

A benchmark that the sweep entry maps to a metric the sweep logs (``metrics: {AIME 2024:
val/aime24/acc}``) is compared on its own as well: per arm, our mean of that metric and its delta
(``ours ... AIME 2024`` columns of ``arms``); per claim, a verdict for that benchmark
(``benchmarks``: one row per claim and mapped benchmark), higher being better as for the paper's
scores unless the entry maps it ``{metric: ..., direction: lower}`` (a drawdown). The objective columns
and each claim's overall verdict stay on the objective and its direction, except for a claim naming a
``benchmark:``: it is judged on that benchmark's metric alone (Figure 2's "GPPO is more stable than CISPO").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from klear_lab.analysis.arm_rows import arm_row
from klear_lab.analysis.benchmark_metrics import optimize
from klear_lab.analysis.scale import Scale, scale_of
from klear_lab.analysis.spec import Analysis, SweepRef
from klear_lab.analysis.verdicts import Measure, benchmark_row, claim_row, judged_benchmarks
from klear_lab.sweep.compare import TrialRecord
from klear_lab.sweep.grid import grid_arms
from klear_lab.sweep.spec import SweepSpec


@dataclass
class Reproduction:
    """One analysis evaluated on one sweep's study."""

    analysis: Analysis
    sweep: SweepSpec
    arms: pd.DataFrame
    claims: pd.DataFrame
    n_complete: int  # grid points x seeds with a completed trial
    n_trials: int  # grid points x seeds the sweep plans (not its trials: a retry is the same point)
    metrics: dict[str, str] = field(default_factory=dict)  # mapped paper benchmark -> our metric
    directions: dict[str, str] = field(default_factory=dict)  # mapped paper benchmark -> higher or lower (is better)
    benchmarks: pd.DataFrame = field(default_factory=pd.DataFrame)  # one row per (claim, mapped benchmark)
    unfinished: list[str] = field(default_factory=list)  # "ARM seed=S" points with no finished trial
    rerun: str = ""  # the command that runs them: ``klear-lab sweep SPEC``
    failed: list[str] = field(default_factory=list)  # "ARM seed=S" points a rerun would fail again: not unfinished
    failure: str = ""  # the first of those: ``trial 3: ConfigError: ...``
    crashed: list[str] = field(default_factory=list)  # unfinished points whose latest trial raised (not a kill)
    scale: Scale = Scale("unknown", "")  # what ours ran at: a tiny model on an embedded world, or a checkpoint


def objective_values(records: list[TrialRecord], label: str, metric: str) -> np.ndarray:
    """The ``metric`` (the objective, or a table metric) of every completed trial of sweep arm ``label``."""
    vals = [r.metrics.get(metric) for r in records if r.arm == label and r.state == "COMPLETE"]
    return np.array([v for v in vals if v is not None and math.isfinite(v)], dtype=float)


def mapped_metrics(analysis: Analysis, ref: SweepRef) -> dict[str, str]:
    """The sweep entry's paper benchmark -> metric map, in the analysis's benchmark order."""
    return {bench: ref.metrics[bench] for bench in analysis.benchmarks if bench in ref.metrics}


def reproduce(analysis: Analysis, ref: SweepRef, spec: SweepSpec, records: list[TrialRecord],
              source: Path | None = None) -> Reproduction:
    """The tables for ``records`` of the sweep ``spec`` (no study: ``records`` are its trials); ``source``:
    the spec file the sweep was launched from (default ``spec.path``), named in the command that finishes
    it unless the sweep directory says otherwise (:func:`rerun_of`)."""
    metrics = mapped_metrics(analysis, ref)
    rerun = rerun_of(spec, source)
    objective = _measure(analysis, ref, spec, records, rerun, spec.metric, spec.direction)
    # a metric mapped to a paper benchmark stands for its score (accuracy, pass rate): higher is better
    # whichever way the sweep's objective points (a sweep may minimize a loss), unless the entry says lower
    mapped = {bench: _measure(analysis, ref, spec, records, rerun, metric, optimize(ref.direction(bench)))
              for bench, metric in metrics.items()}
    per_bench = {bench: measure.values for bench, measure in mapped.items()}
    base = ref.label_of[analysis.baseline]
    rows = [arm_row(analysis, arm, ref.label_of.get(arm), objective.values, per_bench, base) for arm in analysis.paper]
    matched = set(ref.label_of.values())
    rows += [arm_row(analysis, None, label, objective.values, per_bench, base) for label in ref.labels
             if label not in matched]
    claims = [claim_row(analysis, ref, claim, objective, mapped) for claim in analysis.claims]
    benches = [benchmark_row(analysis, ref, claim, bench, mapped[bench])
               for claim in analysis.claims for bench in judged_benchmarks(analysis, claim, mapped)]
    n_complete, planned, unfinished, failed = progress(spec, records)
    failures = [r for (arm, seed), r in config_failed(records).items() if point_label(arm, seed) in failed]
    return Reproduction(analysis, spec, pd.DataFrame(rows), pd.DataFrame(claims), n_complete=n_complete,
                        n_trials=planned, metrics=metrics, benchmarks=pd.DataFrame(benches),
                        directions={bench: ref.direction(bench) for bench in metrics},
                        unfinished=unfinished, rerun=rerun, failed=failed,
                        failure=_failure(failures[0]) if failures else "", crashed=crashed(records, unfinished),
                        scale=scale_of(spec))


def rerun_of(spec: SweepSpec, source: Path | None = None) -> str:
    """The command that continues the sweep: its launch spec with the ``--name``/``--out-dir`` it was run
    with, or its frozen spec (``locate.continue_command``); ``klear-lab sweep SOURCE`` without a sweep directory.
    ``klear-lab sweep SOURCE`` alone continued another study than a sweep run with ``--name``/``--out-dir``."""
    from klear_lab.sweep.locate import continue_command

    return continue_command(spec.sweep_dir, source or spec.path)


def progress(spec: SweepSpec, records: list[TrialRecord]) -> tuple[int, int, list[str], list[str]]:
    """(complete, planned, unfinished ``ARM seed=S``, failed ``ARM seed=S``) over the grid's points x seeds.

    Trials are not counted: a Ctrl-C'd trial and the retry queued for it are two trials of one point,
    and counting them made a 6-point sweep read "4/7". A pruned point is finished (a rerun does not
    run it again) but not complete (it has no result); a failed one (:func:`config_failed`) is neither,
    but a rerun would fail it again, so it is not listed as unfinished."""
    planned = ([(arm.label, seed) for arm in grid_arms(spec) for seed in spec.seeds] if spec.sampler == "grid"
               else list(dict.fromkeys((r.arm, r.seed) for r in records)))
    complete = {(r.arm, r.seed) for r in records if r.state == "COMPLETE"}
    finished = complete | {(r.arm, r.seed) for r in records if r.state == "PRUNED"}
    refused = config_failed(records)
    unfinished = [point_label(*p) for p in planned if p not in finished | refused.keys()]
    failed = [point_label(*p) for p in planned if p in refused]
    return sum(point in complete for point in planned), len(planned), unfinished, failed


def crashed(records: list[TrialRecord], unfinished: list[str]) -> list[str]:
    """The ``unfinished`` points whose latest trial failed on an error of its own (a plugin's exception, a
    process that died), not a Ctrl-C or SIGTERM: a rerun retries them, and their logs say why they failed."""
    from klear_lab.errors import INTERRUPTED
    from klear_lab.sweep.trial import TERMINATED

    latest = {point_label(*p): r for p, r in latest_trials(records).items()}
    return [p for p in unfinished if (r := latest.get(p)) is not None and r.state == "FAIL" and r.error
            and r.error not in (INTERRUPTED, TERMINATED)]


def point_label(arm: str, seed: int) -> str:
    """How a grid point and seed is named in the report: ``ARM seed=S``."""
    return f"{arm} seed={seed}"


def latest_trials(records: list[TrialRecord]) -> dict[tuple[str, int], TrialRecord]:
    """(arm, seed) -> its latest trial (``records`` in trial order: the last one wins)."""
    return {(r.arm, r.seed): r for r in records}


def config_failed(records: list[TrialRecord]) -> dict[tuple[str, int], TrialRecord]:
    """(arm, seed) -> its latest trial, for the points without a finished trial whose latest trial failed on a
    config or data error, or diverged (``config_error``, as ``klear-lab sweep`` tells them apart): a rerun would
    fail them the same way. ``records`` in trial order; a retry queued or running since makes the point unfinished."""
    latest = latest_trials(records)
    finished = {(r.arm, r.seed) for r in records if r.state in ("COMPLETE", "PRUNED")}
    return {point: r for point, r in latest.items() if r.config_error and point not in finished}


def fix_config(failure: str, logs: Path, code: str = "") -> str:
    """``klear-lab sweep``'s advice for trials a rerun would fail again: ``fix the config first: a rerun would
    likely repeat (trial 3: ConfigError: ...); see the trial logs in SWEEP_DIR/trials``."""
    return (f"fix the config first: a rerun would likely repeat ({failure}); "
            f"see the trial logs in {code}{logs}{code}")


def _failure(record: TrialRecord) -> str:
    """``trial 3: ConfigError: ...``: the first line of its error (it goes in a table cell)."""
    error = record.error.strip().splitlines()[0] if record.error.strip() else ""
    return f"trial {record.number}" + (f": {error}" if error else "")


def _measure(analysis: Analysis, ref: SweepRef, spec: SweepSpec, records: list[TrialRecord], rerun: str,
             metric: str, direction: str) -> Measure:
    """Each sweep arm's values of ``metric`` and why a paper arm has none, to judge claims on it."""
    values = {label: objective_values(records, label, metric) for label in ref.labels}
    return Measure(metric, direction, values, _why_empty(analysis, ref, spec, records, metric, values, rerun))


def _why_empty(analysis: Analysis, ref: SweepRef, spec: SweepSpec, records: list[TrialRecord], metric: str,
               values: dict[str, np.ndarray], rerun: str) -> dict[str, str]:
    """Paper arm -> why it has no value of ``metric``, for each arm without one: a claim on it said a bare
    "no result" whether the sweep lacks the arm or has yet to finish it."""
    why = {arm: _why(arm, ref.label_of.get(arm), spec.seeds, records, metric, rerun, spec.sweep_dir / "trials")
           for arm in analysis.paper if not len(values.get(ref.label_of.get(arm, ""), []))}
    spare = [label for label in ref.labels if label not in ref.label_of.values()]
    for arm in why:
        if spare and arm not in ref.label_of:  # the sweep may have it under another label: say how to map it
            why[arm] += (f"; sweep arm(s) {', '.join(spare)} stand for no paper arm: map one to {arm} with "
                         f"`arms: {{\"{spare[0]}\": {arm}}}` in the `sweeps:` entry for {Path(ref.spec_path).name} "
                         f"in {analysis.path}")
    return why


def _why(arm: str, label: str | None, seeds: list[int], records: list[TrialRecord], metric: str,
         rerun: str, logs: Path) -> str:
    """``cispo: not an arm of this sweep``, ``cispo: 0 of 2 seeds completed: run the sweep again: ...``,
    ``cispo: 0 of 2 seeds completed: 2 failed on a config or data error, or diverged (fix the config
    first: ...)``, ... (``logs``: the sweep's trial logs)."""
    if label is None:
        return f"{arm}: not an arm of this sweep"
    mine = [r for r in records if r.arm == label]
    complete = {r.seed for r in mine if r.state == "COMPLETE"}
    if complete:  # diverged (inf), or never logged the metric
        return f"{arm}: no finite {metric} in its {len(complete)} finished seed(s)"
    pruned = {r.seed for r in mine if r.state == "PRUNED"}
    refused = [r for r in config_failed(mine).values() if r.seed in seeds]
    why = f"{arm}: 0 of {len(seeds)} seeds completed" + (f" ({len(pruned)} pruned)" if pruned else "")
    if refused:  # a rerun fails them again: as `klear-lab sweep` ends, fix the config first
        why += (f": {len(refused)} failed on a config or data error, or diverged "
                f"({fix_config(_failure(refused[0]), logs)})")
        if len(pruned) + len(refused) < len(seeds):
            why += f"; {len(seeds) - len(pruned) - len(refused)} not finished"
    return why + f": run the sweep again: {rerun}" if len(pruned) + len(refused) < len(seeds) else why
