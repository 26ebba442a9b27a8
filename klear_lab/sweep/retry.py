"""Retries of a trial that Ctrl-C killed or a network failure failed: queued at once, held back, resumed.

Optuna queues the retry of a dead worker's trial itself (heartbeats, ``storage.py``); here the same is done
for a trial whose end the worker saw, a network failure's retry waits longer each time, and a retry continues
its predecessor's run from its checkpoint instead of starting over (and a run a retry started over in a
new directory is named superseded, ``superseded_runs``).
"""

from __future__ import annotations

import copy
import time
import warnings
from typing import Any

import optuna
from optuna.trial import TrialState

from klear_lab.errors import ConfigError
from klear_lab.sweep.spec import SweepSpec
from klear_lab.sweep.trial import CONFIG_ERROR_ATTR, NO_OBJECTIVE_ATTR, TRANSIENT_ATTR

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
    from klear_lab.sweep.record import RUN_DIR_ATTR
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
    its own, names the same directory and supersedes nothing. Each in the sweep's own ``runs/`` where there
    is one of its name (``SweepSpec.own_run_dir``): a copied sweep marked the original's runs."""
    from klear_lab.sweep.grid import canonical_point
    from klear_lab.sweep.record import RUN_DIR_ATTR

    point = canonical_point(study._storage.get_trial(trial_id).user_attrs.get("point"))
    if point is None:
        return []
    attempts = sorted((t for t in study.get_trials(deepcopy=False) if t.user_attrs.get(RUN_DIR_ATTR)
                       and canonical_point(t.user_attrs.get("point")) == point), key=lambda t: t.number)
    dirs = [spec.own_run_dir(t.user_attrs[RUN_DIR_ATTR]) for t in attempts]
    return [(old_dir, new_dir, new.number)
            for old, new, old_dir, new_dir in zip(attempts, attempts[1:], dirs, dirs[1:])
            if old.state == TrialState.FAIL and old_dir != new_dir]
