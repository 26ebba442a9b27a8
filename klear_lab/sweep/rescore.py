"""``klear-lab compare SWEEP --rescore key=value ...``: score every finished trial again, then compare.

Sweeps are cheap to run with greedy evaluation on a few hundred problems, which is noisy; the paper
scores with avg@k (k samples at temperature 0.6, top_p 0.95). Rescoring runs ``klear-lab eval`` on
each completed trial's run with the given overrides (``eval.samples=8 eval.temperature=0.6
eval.top_p=0.95``, another ``data.eval_sources``...). Each evaluation is a run of its own, written
beside the trial's run in the sweep's W&B group with job type ``eval``. A trial already scored with the
same evaluation config is not scored again, so an interrupted rescore resumes. Every trial's eval
config is built before any is scored (bad overrides stop first); a trial whose run is gone or whose
evaluation fails is a failed row, said in the log, and the command exits 1. The table of the new
numbers (held-out metrics only: ``val/*``) goes to ``SWEEP_DIR/rescore-<hash of the overrides>/``
with ``rescore.json`` naming the overrides and each trial's eval run. With ``--out-dir DIR`` (a sweep directory
that cannot be written: a read-only mount, another user's) the eval runs go to ``DIR/runs/`` and the table to
``DIR/rescore-<hash>/``; evaluations already made beside the trials' runs still count as scored before.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import pandas as pd

from klear_lab.sweep.baseline_table import baseline_source
from klear_lab.sweep.compare import TrialRecord, arm_seeds, check_finished, load_records, summarize, table_arms
from klear_lab.sweep.compare_text import baseline_note, to_markdown, untrained_notes
from klear_lab.sweep.render import write_csv
from klear_lab.sweep.spec import SweepSpec


def rescore_study(spec: SweepSpec, study: Any, overrides: list[str], console: Any = None,
                  log: Any = print, out_dir: Path | None = None) -> tuple[pd.DataFrame, int]:
    """Score each completed trial with ``overrides`` (skipping ones already scored); the table and
    the number of trials that could not be scored. ``out_dir``: where the eval runs (``runs/``) and the table
    go instead of the sweep directory."""
    from klear_lab.stages.eval import check_eval_overrides

    check_eval_overrides(overrides, "--rescore")  # before any trial is looked at, scorable or not
    trials = load_records(spec, study)
    check_finished(spec, trials, ("COMPLETE",), "score")  # an empty table and exit 0 said nothing was scored
    placed = [f"run.out_dir={json.dumps(str(out_dir / 'runs'))}"] if out_dir else []  # quoted: a '#' or ': ' in it
    plans = [plan_trial(spec, r, [*placed, *overrides], log) for r in trials]  # every config before any scoring
    configs = [cfg for _, cfg in plans if cfg is not None]
    check_new_data(overrides, configs)
    table_dir = (out_dir or spec.sweep_dir) / f"rescore-{overrides_tag(overrides)}"
    check_writable(table_dir, configs)
    records, runs, failed = [], {}, 0
    elsewhere = scored_elsewhere(spec.runs_dir)
    for trial, (r, cfg) in zip(trials, plans):
        if cfg is None:
            failed += trial.state == "COMPLETE"  # finished, but its run is gone or unusable now
            records.append(r)
            continue
        try:
            metrics, eval_dir = score(cfg, log, scored_hashes(cfg, elsewhere))
        except Exception as exc:  # noqa: BLE001 - one trial's failure is a failed row, not a lost table
            log(f"rescore: {r.run_dir}: evaluation failed: {type(exc).__name__}: {exc}")
            records.append(dataclasses.replace(r, state="FAIL", metrics={}))
            failed += 1
            continue
        records.append(dataclasses.replace(r, metrics=metrics, run_dir=str(eval_dir)))
        runs[r.run_dir] = str(eval_dir)
    return write_table(spec, records, overrides, runs, console, untrained_notes(trials), table_dir), failed


def check_writable(table_dir: Path, configs: list[dict[str, Any]]) -> None:
    """The table's directory and every eval run's ``run.out_dir`` can be written, before any trial is scored: a
    read-only sweep directory stops the command (exit 2) naming it, not after an hour of scoring."""
    from klear_lab.sweep.path_checks import writable_dir
    from klear_lab.tracking import out_dir_of

    hint = "; `klear-lab compare SWEEP --rescore ... --out-dir DIR` writes the eval runs and the table to DIR"
    for path in dict.fromkeys([*map(out_dir_of, configs), table_dir]):
        writable_dir(path, hint)


def check_new_data(overrides: list[str], configs: list[dict[str, Any]]) -> None:
    """Held-out data the overrides name is read once before any trial is scored: a missing or bad file stops
    the command (exit 2) rather than failing every trial's evaluation and writing a table of dashes."""
    from klear_lab.builders import build_eval_records
    from klear_lab.config.layers import override_key

    if configs and any(override_key(o).startswith("data.") for o in overrides):
        build_eval_records(configs[0])  # DataError / ConfigError: naming the file, row and field


def plan_trial(spec: SweepSpec, r: TrialRecord, overrides: list[str],
               log: Any) -> tuple[TrialRecord, dict[str, Any] | None]:
    """(the trial's record, its eval config), or (its record, None) when there is nothing to score: a
    failed record when its run is gone or unusable. Bad overrides raise :class:`ConfigError`.

    A sweep directory moved since keeps its trials' runs in its own ``runs/`` (``SweepSpec.own_run_dir``).
    """
    from klear_lab.stages.eval import eval_config, unscorable

    blank = TrialRecord(r.arm, r.seed, r.state, {}, r.run_dir, r.point)
    if r.state != "COMPLETE":
        return blank, None
    run_dir = Path(spec.own_run_dir(r.run_dir) or "")
    problem = unscorable(run_dir) if r.run_dir else "the trial recorded no run directory"
    if problem:
        log(f"rescore: trial {r.arm} seed {r.seed}: cannot be scored, counted as failed: {problem}")
        return dataclasses.replace(blank, state="FAIL"), None
    return dataclasses.replace(blank, run_dir=str(run_dir)), eval_config(run_dir, overrides)


def scored_elsewhere(runs_dir: Path) -> set[Path]:
    """The directories other than ``runs_dir`` in which the eval runs in ``runs_dir`` found the runs they scored:
    where a sweep directory moved or copied since ran. Its eval runs came along, hashed with the path of the
    run they scored there."""
    import yaml

    here, out = runs_dir.resolve(), set()
    for saved in runs_dir.glob("*/config.yaml"):
        try:
            cfg = yaml.safe_load(saved.read_text()) or {}
            model = Path(cfg["model"]["name_or_path"]) if cfg["run"]["kind"] == "eval" else here
        except (OSError, yaml.YAMLError, KeyError, TypeError):  # not a run's config: not an eval run
            continue
        if model.parent != here:
            out.add(model.parent)
    return out


def scored_hashes(cfg: dict[str, Any], elsewhere: set[Path]) -> list[str]:
    """The config hashes an earlier scoring of a trial with eval config ``cfg`` carries: ``cfg``'s, and the one
    it had with the scored run (of the same name) in each directory of ``elsewhere`` (:func:`scored_elsewhere`):
    a moved or copied sweep directory's trials are not scored again."""
    from klear_lab.tracking import config_hash

    model = Path(cfg["model"]["name_or_path"])
    there = [{**cfg, "model": {**cfg["model"], "name_or_path": str(parent / model.name)}}
             for parent in sorted(elsewhere)]
    return [config_hash(c) for c in (cfg, *there)]


def score(cfg: dict[str, Any], log: Any = print, hashes: list[str] | None = None) -> tuple[dict[str, float], Path]:
    """The metrics of one eval config: from an earlier identical eval run (one whose config hash is in
    ``hashes``, default ``cfg``'s: :func:`scored_hashes`), or a new one."""
    from klear_lab.run import run_experiment
    from klear_lab.starting_point import find_completed_run, records_digests
    from klear_lab.tracking import config_hash, out_dir_of

    scored = Path(cfg["model"]["name_or_path"])
    name, data = scored.name, records_digests(cfg)  # not one scored on an eval file's rows before an edit
    places = dict.fromkeys([out_dir_of(cfg), scored.parent])  # and beside the run: before a `--out-dir`
    found = (find_completed_run(place, h, seed=cfg["run"]["seed"], need_model=False, data=data)
             for place in places for h in hashes or [config_hash(cfg)])
    done = next((d for d in found if d is not None), None)
    if done is not None and (done / "summary.json").is_file():
        log(f"rescore: {name}: scored before ({done.name})")
        summary = json.loads((done / "summary.json").read_text())
        return {k: float(v) for k, v in summary.items() if isinstance(v, (int, float))}, done
    log(f"rescore: {name}: scoring")
    result = run_experiment(cfg)
    return result.metrics, result.run_dir


def write_table(spec: SweepSpec, records: list[TrialRecord], overrides: list[str], runs: dict[str, str],
                console: Any = None, trained_notes: list[str] | tuple[str, ...] = (),
                out_dir: Path | None = None) -> pd.DataFrame:
    """table.csv, table.md and rescore.json in ``out_dir`` (default ``SWEEP_DIR/rescore-<tag>/``); the Rich
    table printed. ``trained_notes``: notes on the trials' training (arms whose policy never updated), which the
    eval runs' metrics cannot show."""
    from klear_lab.sweep.render import print_table, versus
    from klear_lab.tracking import atomic_write, write_json

    order, baseline = table_arms(spec, records)
    objective, substituted = rescored_objective(spec.metric)
    metrics = [m for m in held_out_metrics(spec, records) if m != objective]
    direction = "maximize" if substituted else spec.direction  # a held-out accuracy (not a drawdown's minimize)
    table_spec = dataclasses.replace(spec, metric=objective, metrics=metrics, direction=direction)
    df = summarize(records, table_spec.metric, table_spec.metrics, direction, baseline, order,
                   seeds_per_arm=arm_seeds(spec))
    out_dir = out_dir or spec.sweep_dir / f"rescore-{overrides_tag(overrides)}"
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "rescore.json", {"overrides": overrides, "eval_runs": runs})
    write_csv(df, out_dir / "table.csv", baseline)
    notes = (*((baseline_note(spec, baseline),) if baseline is not None else ()),  # where the baseline came from
             *((substituted,) if substituted else ()), *trained_notes)
    markdown = to_markdown(df, table_spec.metric, table_spec.metrics, baseline, notes)
    atomic_write(out_dir / "table.md", lambda tmp: tmp.write_text(f"Rescored: {' '.join(overrides)}\n\n{markdown}"))
    title = f"sweep {spec.name} rescored ({' '.join(overrides)}): {objective}{versus(baseline)}"
    print_table(df, table_spec, baseline, out_dir, None, console, title=title,
                extra=(baseline_source(spec, baseline), *notes))  # as compare's: the plain source on screen
    return df


CURVE_SUMMARIES = ("_last5", "_best", "_final", "_start")
"""Suffixes of RL's training-curve summaries of a held-out accuracy (``stages/gain.py``), which an evaluation
of one checkpoint does not log."""


def rescored_objective(metric: str) -> tuple[str, str]:
    """What a rescored table compares for the sweep's objective ``metric``, and a note when it is not
    ``metric`` itself: an evaluation logs no training-curve summary (``val/aime24/acc_last5``,
    ``val/acc_best``), so such an objective is compared as its held-out accuracy (``val/aime24/acc``), and
    one with no such counterpart (``val/gain``) as ``val/acc``. Every cell of the objective was empty."""
    from klear_lab.sweep.metrics import is_logged

    if is_logged(metric, "eval"):
        return metric, ""
    base = next((metric.removesuffix(s) for s in CURVE_SUMMARIES if metric.endswith(s)), "")
    used = base if base and is_logged(base, "eval") else "val/acc"
    return used, (f"the sweep's objective {metric} is not something one evaluation logs (a summary of the "
                  f"training curve, or of two evaluations): the rescored table compares {used} instead, higher "
                  "is better")


def held_out_metrics(spec: SweepSpec, records: list[TrialRecord]) -> list[str]:
    """The spec's table metrics an eval run produces (``val/*``, but not RL's ``val/gain``), plus
    ``val/pass_at_k`` when the rescoring draws several samples."""
    produced = {k for r in records for k in r.metrics}
    names = [m for m in spec.metrics if m.startswith("val/") and m in produced]
    return names + (["val/pass_at_k"] if "val/pass_at_k" in produced and "val/pass_at_k" not in names else [])


def overrides_tag(overrides: list[str]) -> str:
    """A short name for what the overrides set (the last value of a repeated key wins; order-free)."""
    from klear_lab.config.layers import dotlist_layer

    _, layer = dotlist_layer(overrides)
    return hashlib.sha256(json.dumps(layer, sort_keys=True, default=str).encode()).hexdigest()[:8]
