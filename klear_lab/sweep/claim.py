"""A worker's side of the queue (``queue.py``): claim the next trial, draw its axis values and seed, keep
its heartbeat while it runs, and fail the trials of dead workers.

Claims are made under the study's lock, retries first; a ``tpe``/``random`` sweep asks its sampler for a
new trial when none is WAITING, up to ``n_trials``.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import optuna
from optuna.trial import TrialState

from klear_lab.sweep.grid import SEED_PARAM, arm_label, axis_distribution, decode, encode, point_key
from klear_lab.sweep.queue import COVERED, count
from klear_lab.sweep.retry import NOT_BEFORE_ATTR, retry_history
from klear_lab.sweep.spec import SweepSpec
from klear_lab.sweep.storage import StudyLock, make_sampler
from klear_lab.sweep.successor import CHOICES_ATTR


def take_trial(study: optuna.Study, spec: SweepSpec, lock: StudyLock, *, ask: bool = True,
               mine: set[int] | None = None) -> int | None:
    """Claim the next trial (RUNNING, first heartbeat recorded) or None when no work is left.

    ``ask=False``: only WAITING trials, no new ``tpe``/``random`` ones (the worker saw trials keep failing).
    ``mine``: the claimed trial's id is added to it under the lock, so that a reader holding the lock never
    sees this process's fresh claim as another's (``worker.note_waiting``).
    Retries come first (they continue a killed trial's run from its checkpoint: a rerun after Ctrl-C
    started the next arm before them); a WAITING retry whose ``NOT_BEFORE_ATTR`` lies ahead is left for later.
    """
    storage = study._storage  # the storage API (set_trial_state_values, record_heartbeat) is public
    with lock.hold():
        held_back = False
        waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        for frozen in sorted(waiting, key=lambda t: (not retry_history(t), t.number)):
            if frozen.system_attrs.get(NOT_BEFORE_ATTR, 0.0) > time.time():
                held_back = True
                continue
            # the heartbeat first: a RUNNING trial without one is never found stale (Optuna skips it), so a
            # failure between the two would leave it RUNNING for good and the sweep waiting on it
            _heartbeat(storage, frozen._trial_id)
            try:
                if storage.set_trial_state_values(frozen._trial_id, state=TrialState.RUNNING):
                    return _claimed(frozen._trial_id, mine)
            except optuna.exceptions.UpdateFinishedTrialError:
                continue
        # study.ask() takes the first WAITING trial itself, a held-back retry included
        if held_back or not ask or spec.sampler == "grid" or count(study, COVERED) >= (spec.n_trials or 0):
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "heartbeat is supposed to be used with optimize"
            trial = study.ask()
        try:
            _heartbeat(storage, trial._trial_id)
        except Exception:
            storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)  # not left RUNNING unseen
            raise
        return _claimed(trial._trial_id, mine)


def _claimed(trial_id: int, mine: set[int] | None) -> int:
    if mine is not None:
        mine.add(trial_id)
    return trial_id


def claimed_trial(study: optuna.Study, trial_id: int, spec: SweepSpec) -> optuna.trial.Trial:
    """The claimed trial, its parameters to be drawn by a sampler seeded for its number
    (:func:`make_sampler`; ``study`` is this worker's own)."""
    if spec.sampler != "grid":
        study.sampler = make_sampler(spec, study._storage.get_trial(trial_id).number)
    return optuna.trial.Trial(study, trial_id)


def trial_values(trial: optuna.trial.Trial, spec: SweepSpec) -> tuple[dict[str, Any], int, str]:
    """The trial's axis values (decoded), seed and arm label; records params and user attrs."""
    values: dict[str, Any] = {}
    study_choices = trial.study.user_attrs.get(CHOICES_ATTR, {}) if spec.sampler == "grid" else {}
    for axis in spec.axes:
        if not axis.is_range:
            choices = study_choices.get(axis.key) or [encode(v) for v in axis.values]
            values[axis.key] = decode(trial.suggest_categorical(axis.key, choices))
        else:
            dist = axis_distribution(axis)
            is_int = isinstance(dist, optuna.distributions.IntDistribution)
            suggest = trial.suggest_int if is_int else trial.suggest_float
            values[axis.key] = suggest(axis.key, dist.low, dist.high, log=dist.log, step=dist.step)
    attrs = trial.user_attrs
    label = attrs.get("arm") or arm_label(spec.axes, values)
    if spec.sampler == "grid":
        seed = trial.suggest_categorical(SEED_PARAM, study_choices.get(SEED_PARAM) or list(spec.seeds))
    else:
        seed = attrs["seed"] if "seed" in attrs else drawn_seed(trial, label, spec.seeds)
    for key, value in (("arm", label), ("seed", seed), ("point", point_key(values, seed))):
        if key not in attrs:
            trial.set_user_attr(key, value)
    return values, seed, label


def drawn_seed(trial: optuna.trial.Trial, label: str, seeds: list[int]) -> int:
    """A tpe/random trial's seed: the one its arm has run least (running, finished, pruned or queued; a failed
    one's retry keeps its seed), the seeds taking turns by trial number among equals. By trial number alone,
    an arm a sampler drew again ran a seed again (the same run) while its other seeds never ran."""
    runs = [t.user_attrs.get("seed") for t in trial.study.get_trials(deepcopy=False, states=(
        TrialState.RUNNING, TrialState.COMPLETE, TrialState.PRUNED, TrialState.WAITING))
        if t.number != trial.number and t.user_attrs.get("arm") == label]
    turn = trial.number % len(seeds)
    return min([*seeds[turn:], *seeds[:turn]], key=runs.count)  # min keeps the first of equals


def _heartbeat(storage: Any, trial_id: int) -> None:
    if hasattr(storage, "record_heartbeat") and storage.get_heartbeat_interval() is not None:
        storage.record_heartbeat(trial_id)


def fail_stale(study: optuna.Study, lock: StudyLock) -> None:
    """Fail the trials of dead workers (stale heartbeats); Optuna's callback queues their retries.

    Under the study's lock: on SQLite (no row locks) two workers could both fail one dead trial, and
    each would queue a retry of it, both of which then ran: one point finished twice."""
    with lock.hold(), warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


@contextmanager
def beating(storage: Any, trial_id: int, interval: float) -> Iterator[None]:
    """Record ``trial_id``'s heartbeat every ``interval`` s while the block runs."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(interval):
            try:
                storage.record_heartbeat(trial_id)
            except Exception:  # noqa: BLE001 - a database hiccup must not end the beats: the trial would look dead
                continue

    thread = threading.Thread(target=beat, name=f"heartbeat-{trial_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
