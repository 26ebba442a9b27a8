"""Retries of a trial that Ctrl-C killed or a network failure failed: queued at once, held back, resumed.

Optuna queues the retry of a dead worker's trial itself (heartbeats, ``storage.py``); here the same is done
for a trial whose end the worker saw, a network failure's retry waits longer each time, and a retry continues
its predecessor's run from its checkpoint instead of starting over (and a run a retry started over in a
new directory is named superseded, ``superseded_runs``: one its trial recorded, or one it made and was killed
before recording, ``unrecorded_runs``).
"""

from __future__ import annotations

import copy
import json
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from klear_lab.errors import ConfigError
from klear_lab.sweep.spec import SweepSpec
from klear_lab.sweep.trial import CONFIG_ERROR_ATTR, NO_OBJECTIVE_ATTR, TRANSIENT_ATTR, job_stem

NOT_BEFORE_ATTR = "klear.not_before"  # a WAITING retry is not taken before this time (time.time())


def retry_history(trial: optuna.trial.FrozenTrial) -> list[int]:
    """The numbers of the trials ``trial`` retries, oldest first (empty for a first attempt), through
    Optuna's own reader rather than the system attribute it happens to store them in."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.storages.RetryFailedTrialCallback.retry_history(trial)


def queue_retry(study: optuna.Study, killed: optuna.trial.FrozenTrial) -> optuna.trial.FrozenTrial | None:
    """Enqueue the retry of a trial that Ctrl-C killed or a network failure failed, as Optuna does for a
    dead worker's (heartbeat, up to the spec's ``max_retry`` per point), so that it continues the trial's
    run from its checkpoint (``resumable_run``) instead of starting it over, and without first waiting for
    the trial to look stale. Without heartbeats, or once the point has used up its retries, the rerun
    enqueues the point again. Returns the queued retry, or None."""
    retry = study._storage.get_heartbeat_stale_trial_callback()
    if retry is not None:
        frozen = copy.deepcopy(killed)
        frozen.user_attrs = {k: v for k, v in frozen.user_attrs.items()  # the retry's own
                             if k not in ("error", CONFIG_ERROR_ATTR, NO_OBJECTIVE_ATTR, TRANSIENT_ATTR)}
        retry(study, frozen)
    return next((t for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
                 if retry_history(t)[-1:] == [killed.number]), None)


def hold_retry(study: optuna.Study, retry: optuna.trial.FrozenTrial, base_s: float) -> float:
    """Hold ``retry`` back for ``base_s`` doubled per earlier retry of its point (an outage of a minute
    no longer uses up every retry at once); returns the delay."""
    delay = base_s * 2 ** max(len(retry_history(retry)) - 1, 0)
    study._storage.set_trial_system_attr(retry._trial_id, NOT_BEFORE_ATTR, time.time() + delay)
    return delay


def resumable_run(study: optuna.Study, spec: SweepSpec, trial_id: int, cfg: dict[str, Any]) -> str | None:
    """The run directory a trial continues: that of the latest failed trial of its point (grid point and
    seed; a retry's killed predecessor, or a trial the rerun enqueued again once the retries were used
    up), when that run left a checkpoint and its saved config hashes like ``cfg``. Looked for in the
    sweep's own ``runs/`` first (``SweepSpec.own_run_dir``): a copied sweep trained on in the original's."""
    from klear_lab.resume import as_resolved, resume_config
    from klear_lab.sweep.grid import canonical_point
    from klear_lab.sweep.run_status import RUN_DIR_ATTR
    from klear_lab.tracking import config_hash

    point = canonical_point(study._storage.get_trial(trial_id).user_attrs.get("point"))
    earlier = [t for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
               if point is not None and canonical_point(t.user_attrs.get("point")) == point]
    for trial in sorted(earlier, key=lambda t: t.number, reverse=True):  # the latest attempt first (it may
        run_dir = spec.own_run_dir(trial.user_attrs.get(RUN_DIR_ATTR))    # have resumed an earlier one)
        if run_dir:
            try:
                saved = resume_config(run_dir)
            except ConfigError:  # no checkpoint yet, completed, another config...: start over
                return None
            return run_dir if config_hash(saved) == config_hash(as_resolved(cfg, saved["model"])) else None
    return None


def superseded_runs(study: optuna.Study, spec: SweepSpec, trial_id: int) -> list[tuple[str, str, int]]:
    """The runs of ``trial_id``'s point (grid point and seed) that a later attempt started over instead of
    continuing (no checkpoint yet, another config): (the failed trial's run directory, the next attempt's,
    that attempt's trial number), oldest first. A retry inherits its predecessor's ``run_dir`` (Optuna copies
    the user attributes) until its own run starts, so one that resumed it, or never got as far as a run of
    its own, names the same directory and supersedes nothing; a failed attempt killed after it made its run
    directory and before it recorded it (:func:`unrecorded_runs`) has that run for its own. Each in the
    sweep's own ``runs/`` where there is one of its name (``SweepSpec.own_run_dir``): a copied sweep marked
    the original's runs."""
    from klear_lab.sweep.grid import canonical_point
    from klear_lab.sweep.run_status import RUN_DIR_ATTR

    point = canonical_point(study._storage.get_trial(trial_id).user_attrs.get("point"))
    if point is None:
        return []
    trials = study.get_trials(deepcopy=False)
    attempts = sorted((t for t in trials if canonical_point(t.user_attrs.get("point")) == point),
                      key=lambda t: t.number)
    recorded = {Path(t.user_attrs[RUN_DIR_ATTR]).name for t in trials if t.user_attrs.get(RUN_DIR_ATTR)}
    runs: list[tuple[optuna.trial.FrozenTrial, str]] = []  # (attempt, a run directory of its), in order
    for attempt in attempts:
        orphans = unrecorded_runs(spec, attempt, recorded) if attempt.state == TrialState.FAIL else []
        own = spec.own_run_dir(attempt.user_attrs.get(RUN_DIR_ATTR))
        inherited = bool(orphans) and own in {run_dir for _, run_dir in runs}  # its run was the orphan
        runs += [(attempt, run_dir) for run_dir in orphans] + ([(attempt, own)] if own and not inherited else [])
    return [(old_dir, new_dir, new.number)
            for (old, old_dir), (new, new_dir) in zip(runs, runs[1:])
            if old.state == TrialState.FAIL and old_dir != new_dir]


CLOCK_SLACK_S = 60.0  # a run's files may carry a time a little before its trial's start (another clock: NFS)


def unrecorded_runs(spec: SweepSpec, trial: optuna.trial.FrozenTrial, recorded: set[str]) -> list[str]:
    """The run directories in the sweep's ``runs/`` that ``trial`` made but no trial of the study records
    (``recorded``: their names), oldest first: a trial killed (``kill -9``, the OOM killer, its sweep killed)
    after ``run_experiment`` made its run directory and before training started (``record.RecordRunDir``)
    left one its study never heard of, said "running" for ever, and no retry named superseded. Told by the
    ``run`` section of the config it saved (``run.notes`` names the sweep and the trial's number; ``run.name``,
    ``run.seed``), as in the trial's job file, written while the trial ran (a study made anew in the sweep
    directory numbers its trials from 0 again; and only those configs are read). None without the job file
    or a ``config.yaml`` (a runner of its own that writes none)."""
    import yaml

    from klear_lab.tracking import saved_config

    try:
        want = _run_identity(json.loads(job_stem(spec.sweep_dir, trial.number).with_suffix(".json").read_text())
                             .get("config"))
    except (OSError, ValueError, AttributeError):  # no job file (trials/ cleared), or a damaged one
        return []
    if want is None:
        return []
    since = trial.datetime_start.timestamp() - CLOCK_SLACK_S if trial.datetime_start else 0.0
    until = trial.datetime_complete.timestamp() + CLOCK_SLACK_S if trial.datetime_complete else float("inf")
    found = []
    for config in spec.runs_dir.glob("*/config.yaml"):
        if config.parent.name in recorded:
            continue
        try:
            written = config.stat().st_mtime
            if since <= written <= until and _run_identity(saved_config(config.parent)) == want:
                found.append((written, str(config.parent)))
        except (OSError, yaml.YAMLError):  # gone meanwhile, or damaged: not this one
            continue
    return [run_dir for _, run_dir in sorted(found)]


def _run_identity(cfg: Any) -> tuple[Any, ...] | None:
    """What names the trial that composed ``cfg``: its ``run.notes``, ``run.name`` and ``run.seed``."""
    run = cfg.get("run") if isinstance(cfg, dict) else None
    if not isinstance(run, dict) or not run.get("notes"):
        return None
    return run.get("notes"), run.get("name"), run.get("seed")
