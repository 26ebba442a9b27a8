"""Reproduce the paper's tables and figures from sweeps: ``klear-lab reproduce analysis/fig2_clip.yaml``.

An analysis spec (``analysis/*.yaml``, see ``analysis.spec``) holds one paper table or figure: its
numbers, the paper's claims and the sweeps that reproduce it. ``run_reproduction`` finds the
sweep's study, puts our arms next to the paper's and says, claim by claim, whether the sweep
reproduces it (``analysis.reproduce``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from klear_lab.analysis.reproduce import Reproduction
from klear_lab.analysis.spec import Analysis, SweepRef, load_analysis
from klear_lab.console import shown_path
from klear_lab.errors import ConfigError


class NoResults(ConfigError):
    """None of an analysis's sweeps has been run here yet."""


def run_reproduction(analysis_path: str | Path, target: str | Path | None = None,
                     out_dir: str | Path | None = None, console: Any = None, wandb: bool = True) -> Reproduction:
    """Load the analysis, find its sweep (``target``: a sweep dir or spec; default: the first of the
    analysis's sweeps with results), write ``SWEEP_DIR/reproduce/NAME/``, print the tables and
    (``wandb``) log them as a W&B run in the sweep's group."""
    from klear_lab.analysis.report import write_reproduction
    from klear_lab.analysis.reproduce import reproduce
    from klear_lab.sweep.compare import load_records
    from klear_lab.sweep.locate import locate
    from klear_lab.sweep.path_checks import check_out_dir
    from klear_lab.sweep.spec import user_path
    from klear_lab.sweep.storage import open_study

    option = f"--out-dir {out_dir}" if out_dir else ""
    if out_dir:  # a file there failed in mkdir only after the study was read and the tables computed
        check_out_dir(user_path(out_dir), option)
    analysis = load_analysis(analysis_path)
    where = user_path(target) if target is not None else _first_with_results(analysis)
    spec, url = locate(where)
    out = user_path(out_dir) if out_dir else spec.sweep_dir / "reproduce" / analysis.name
    check_out_dir(out, option or f"{analysis.path}: output directory {out}")
    source = _source_spec(where)
    ref = _ref_for(analysis, spec, source)
    study = open_study(spec, url, create=False, heartbeat=False)
    rep = reproduce(analysis, ref, spec, load_records(spec, study), source if source.is_file() else None)
    png = write_reproduction(rep, out, console)
    if wandb:
        _log_to_wandb(rep, out, png, console)
    return rep


def _log_to_wandb(rep: Reproduction, out: Path, png: Path | None, console: Any) -> None:
    """Log the reproduction as a W&B run; a W&B failure (no API key, no network) only warns:
    the tables are already on disk."""
    from klear_lab.analysis.wandb_log import log_reproduction
    from klear_lab.console import make_console

    console = console or make_console()
    try:
        logged = log_reproduction(rep, out, png)
    except Exception as exc:  # noqa: BLE001 - wandb raises many types; the report must survive them
        console.print(f"W&B logging skipped: {type(exc).__name__}: {exc}; the report is in {out}", markup=False)
        return
    if logged is not None:
        run_dir, url = logged
        where = url or f"{run_dir} (offline: `wandb sync` it)"
        console.print(f"W&B run: {where}, group {rep.sweep.wandb_group or rep.sweep.name}, job type reproduce",
                      markup=False)


def _first_with_results(analysis: Analysis) -> Path:
    """The first of the analysis's sweeps run here with a completed trial; else the first started one
    (its report says what it lacks), so a paper-scale sweep just started does not hide a finished one."""
    from klear_lab.sweep.spec import load_spec

    looked, started = [], []
    for ref in analysis.sweeps:
        sweep_dir = load_spec(ref.spec_path).sweep_dir
        if (sweep_dir / "sweep.json").is_file():
            if _has_completed_trial(sweep_dir):
                return sweep_dir
            started.append(sweep_dir)
        looked.append(f"`klear-lab sweep {shown_path(ref.spec_path)}` (results would be in {sweep_dir})")
    if started:
        return started[0]
    raise NoResults(f"{analysis.path}: no results yet; run one of: " + "; ".join(looked))


def _has_completed_trial(sweep_dir: Path) -> bool:
    import optuna

    from klear_lab.sweep.locate import locate
    from klear_lab.sweep.storage import open_study

    try:
        spec, url = locate(sweep_dir)
        study = open_study(spec, url, create=False, heartbeat=False)
    except Exception:  # noqa: BLE001 - unreadable or unreachable storage: the caller's fallback reports it
        return False
    return bool(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))


def _source_spec(target: Path) -> Path:
    """The spec file a sweep was launched from (a sweep dir records it in ``sweep.json``)."""
    import json

    meta = target / "sweep.json"
    if target.is_dir() and meta.is_file():
        return Path(json.loads(meta.read_text()).get("spec", target / "spec.yaml"))
    return target.resolve()


def _ref_for(analysis: Analysis, spec: Any, source: Path) -> SweepRef:
    """The analysis's entry for this sweep: the one naming its spec file, else the one of the same sweep
    name and arm labels (a sweep launched from another checkout), else the one with the same arm labels,
    else a new entry (:func:`_unlisted_ref`)."""
    from klear_lab.analysis.spec import grid_labels

    labels = grid_labels(spec)
    for ref in analysis.sweeps:
        if ref.spec_path.resolve() == source.resolve():
            return ref
    same_labels = [ref for ref in analysis.sweeps if ref.labels == labels]
    for ref in same_labels:
        if ref.name == spec.name:
            return ref
    if same_labels:
        return same_labels[0]
    return _unlisted_ref(analysis, spec, source, labels)


def _from_analysis(analysis: Analysis, spec_path: Path) -> str:
    """``spec_path`` as an entry of ``analysis``'s ``sweeps:`` names it: relative to the analysis file's folder."""
    return os.path.relpath(Path(spec_path).absolute(), Path(analysis.path).absolute().parent)


def _unlisted_ref(analysis: Analysis, spec: Any, source: Path, labels: list[str]) -> SweepRef:
    """An entry for a sweep whose spec the analysis does not list (a shrunk copy of a shipped sweep, say):
    its arms match paper arms by label, and by the ``arms:`` entries of the first listed sweep that has
    every one of its arm labels (the copy's arms are the original's), else of the first listed sweep whose
    ``arms:`` name one of them; ``metrics:`` entries it keeps (``benchmark_metrics.keeps_metric``) come along,
    each with its direction. A copy of ``sweeps/sft_sources.yaml`` with arms ``[top1, all]`` keeps
    ``{"k=all": top10}``.

    Raises:
        ConfigError: no arm of the sweep stands for the paper's baseline (named once: the sweep's directory).
    """
    from klear_lab.analysis.benchmark_metrics import keeps_metric
    from klear_lab.analysis.spec import SweepRef, make_ref

    donors = [r for r in analysis.sweeps if set(labels) <= set(r.labels)]
    donors += [r for r in analysis.sweeps if r not in donors and set(r.arms) & set(labels)]
    donor = donors[0] if donors else SweepRef(source)
    arms = {label: arm for label, arm in donor.arms.items() if label in labels}
    metrics = {bench: metric for bench, metric in donor.metrics.items() if keeps_metric(spec, metric)}
    probe = SweepRef(source, arms, labels)
    if analysis.baseline not in {probe.paper_arm(label, list(analysis.paper)) for label in labels}:
        raise ConfigError(
            f"{analysis.path}: no arm of the sweep in {spec.sweep_dir} matches the baseline {analysis.baseline!r} "
            f"(its arms: {', '.join(labels)}); the analysis does not list its spec ({shown_path(source)}): add it "
            f"under `sweeps:` with `arms:` naming the paper arm of each sweep arm, e.g. "
            f"`- {{spec: {_from_analysis(analysis, source)}, arms: {{\"{labels[0]}\": \"{analysis.baseline}\"}}}}` "
            "(a spec path is read from the analysis file's folder)")
    directions = {bench: donor.direction(bench) for bench in metrics}
    ref = make_ref(analysis, f"sweep {spec.sweep_dir}", source, arms, labels, metrics, directions)
    ref.name = spec.name
    return ref

