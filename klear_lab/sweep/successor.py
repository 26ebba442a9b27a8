"""Widen a grid sweep (another seed, another axis value) without rerunning what finished.

Optuna fixes a categorical parameter's choices at its first trial in a study ("does not support
dynamic value space"), and a grid sweep's axis values and seeds are categorical parameters. So
when a grid spec adds a value, the sweep continues in a successor study ``NAME@v2`` (then
``@v3``...) in the same storage: every trial of the old study is copied in order (same numbers,
states, values, parameters, attributes and intermediate values) with the widened choices, and
the new points are enqueued there. The old study keeps its finished trials untouched; its
WAITING trials are failed (their copies wait in the successor) and it points to the successor
(``storage.SUCCESSOR_ATTR``), which ``storage.open_study`` follows, so every command, ``--join``
from another machine included, lands on the current study.

Dropping a value needs none of this: the study keeps its choices (``CHOICES_ATTR``, what workers
suggest from) and the comparison table shows the spec's grid only.
"""

from __future__ import annotations

import warnings
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

from klear_lab.errors import ConfigError
from klear_lab.sweep.grid import SEED_PARAM, encode
from klear_lab.sweep.spec import SweepSpec
from klear_lab.sweep.storage import SUCCESSOR_ATTR

CHOICES_ATTR, SUPERSEDES_ATTR = "klear.choices", "klear.supersedes"

Choices = dict[str, list[Any]]  # Optuna parameter name -> encoded categorical choices


def spec_choices(spec: SweepSpec) -> dict[str, tuple[str, list[Any]]]:
    """Parameter name -> (spec key, encoded choices) for the categorical axes, and the seed for grids."""
    out = {axis.key: (axis.key, [encode(v) for v in axis.values]) for axis in spec.axes if not axis.is_range}
    if spec.sampler == "grid":
        out[SEED_PARAM] = ("seeds", list(spec.seeds))
    return out


def recorded_choices(study: optuna.Study) -> Choices:
    """The choices the study's parameters were created with (its attribute, else its trials)."""
    if CHOICES_ATTR in study.user_attrs:
        return {k: list(v) for k, v in study.user_attrs[CHOICES_ATTR].items()}
    out: Choices = {}
    for trial in study.get_trials(deepcopy=False):  # studies from before the attribute existed
        for name, dist in trial.distributions.items():
            if isinstance(dist, CategoricalDistribution) and name not in out:
                out[name] = list(dist.choices)
    return out


def widen_choices(study: optuna.Study, spec: SweepSpec) -> optuna.Study:
    """Make the grid study's choices cover the spec's; return the study to run (maybe a successor).

    Raises:
        ConfigError: the spec adds values while trials of the study are running.
    """
    merged, added = added_choices(study, spec)
    if added:
        study = _supersede(study, spec, merged, added)
    study.set_user_attr(CHOICES_ATTR, merged)
    return study


def added_choices(study: optuna.Study, spec: SweepSpec) -> tuple[Choices, dict[str, list[Any]]]:
    """The study's choices widened by the spec's, and what the spec adds (spec key -> encoded values, e.g.
    ``{"seeds": [2]}``): a study that must be continued in a copy when that is not empty. Reads only."""
    recorded = recorded_choices(study)
    merged: Choices = dict(recorded)
    added: dict[str, list[Any]] = {}
    for name, (key, values) in spec_choices(spec).items():
        old = recorded.get(name)
        new = [v for v in values if old is not None and v not in old]
        merged[name] = values if old is None else [*old, *new]
        if new:
            added[key] = new
    return merged, added


def widening_note(study: optuna.Study, spec: SweepSpec) -> str | None:
    """What running ``spec`` does to its existing grid ``study`` when it adds seeds or values (``--validate-only``
    says it before it happens): continue in a copy, or be refused while trials run. None when it adds none."""
    if spec.sampler != "grid" or not (added := added_choices(study, spec)[1]):
        return None
    running = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    note = (f"the spec adds {_describe(added)}, so running it continues the study in a copy, "
            f"{_next_name(study.study_name)!r}, holding its trials")
    if running:
        note += (f"; trial(s) {running} are marked running: it refuses while any of them is alive, and goes ahead "
                 f"once a killed sweep's heartbeats are {2 * spec.heartbeat_interval} s old")
    return note


def _supersede(study: optuna.Study, spec: SweepSpec, choices: Choices, added: dict[str, list[Any]],
               ) -> optuna.Study:
    """Copy ``study`` into a new study whose categorical parameters have ``choices``.

    Called under the study's lock, on a study with no successor. The copy records its choices first
    and the old study points to it last, so a crash in between leaves an unreachable copy, which the
    next attempt replaces (names with ``@`` are never a spec's).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)  # trials of killed workers: failed, retries enqueued
    running = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    if running:
        raise ConfigError(
            f"{spec.path}: the spec adds {_describe(added)}, which needs a new Optuna study (a categorical parameter's "
            f"choices are fixed within one), but trial(s) {running} of study {study.study_name!r} are running; "
            "let them finish or stop their workers, then run the same command again (the trials of a killed "
            f"sweep count as running until their heartbeats are {2 * spec.heartbeat_interval} s old)")
    storage = study._storage  # the storage API behind the study is public
    name = _next_name(study.study_name)
    if name in optuna.get_all_study_names(storage):  # left by a crash half-way through a copy
        optuna.delete_study(study_name=name, storage=storage)
    successor = optuna.create_study(study_name=name, storage=storage, direction=study.direction,
                                    sampler=study.sampler, pruner=study.pruner)
    successor.set_user_attr(CHOICES_ATTR, choices)
    for key, value in study.user_attrs.items():
        if key not in (CHOICES_ATTR, SUPERSEDES_ATTR, SUCCESSOR_ATTR):
            successor.set_user_attr(key, value)
    dists = {n: CategoricalDistribution(c) for n, c in choices.items()}  # only parameters trials have are used
    old_trials = study.get_trials(deepcopy=False)
    for trial in old_trials:
        successor.add_trial(_copy(trial, dists))
    copied = successor.get_trials(deepcopy=False)
    if [t.number for t in copied] != [t.number for t in old_trials]:
        raise RuntimeError(f"copying study {study.study_name!r} into {name!r} renumbered its trials")
    successor.set_user_attr(SUPERSEDES_ATTR, {"study": study.study_name, "added": added, "copied": len(copied)})
    study.set_user_attr(SUCCESSOR_ATTR, name)
    for trial in old_trials:  # their copies wait in the successor; no worker may run them here too
        if trial.state == TrialState.WAITING:
            storage.set_trial_user_attr(trial._trial_id, "superseded_by", name)
            storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
    return successor


def _copy(trial: FrozenTrial, dists: dict[str, CategoricalDistribution]) -> FrozenTrial:
    start = trial.datetime_start
    if start is None and trial.state.is_finished():  # failed while WAITING: it never started
        start = trial.datetime_complete
    return FrozenTrial(
        number=trial.number, state=trial.state, value=None, values=trial.values, datetime_start=start,
        datetime_complete=trial.datetime_complete, params=dict(trial.params),
        distributions={n: dists.get(n, d) for n, d in trial.distributions.items()},
        user_attrs=dict(trial.user_attrs), system_attrs=dict(trial.system_attrs),
        intermediate_values=dict(trial.intermediate_values), trial_id=trial._trial_id)


def _describe(added: dict[str, list[Any]]) -> str:
    """``seeds [2]; optim.lr [0.004]``."""
    return "; ".join(f"{key} {values}" for key, values in added.items())


def _next_name(name: str) -> str:
    """``NAME`` -> ``NAME@v2``, ``NAME@v2`` -> ``NAME@v3``."""
    root, _, version = name.partition("@v")
    return f"{root}@v{int(version) + 1 if version.isdigit() else 2}"


def superseded_note(study: optuna.Study) -> str | None:
    """One line on what this study continues, for the sweep's log; None for an original study."""
    info = study.user_attrs.get(SUPERSEDES_ATTR)
    if not info:
        return None
    return (f"the spec added {_describe(info['added'])}: continuing in study {study.study_name!r}, a copy of "
            f"{info['study']!r} with its {info['copied']} trials (finished ones are "
            "not rerun; Optuna fixes a categorical parameter's choices within a study)")
