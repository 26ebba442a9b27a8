"""The study as a work queue: enqueue each grid point x seed once; workers pop WAITING trials atomically
(``claim.py``).

Optuna's GridSampler hands the same point to two parallel workers; here every point is
enqueued once (``study.enqueue_trial``) and workers only take WAITING trials, so the
finished study holds each point x seed exactly once. Re-running enqueues only the points
with no COMPLETE, PRUNED, RUNNING or WAITING trial (failed ones), so a resume never repeats
finished work; a grid spec that gained seeds or axis values continues in a successor study
(``successor.py``). ``tpe``/``random`` sweeps ask the sampler for new trials up to ``n_trials``.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import TrialState

from klear_lab.errors import ConfigError
from klear_lab.sweep.grid import Arm, axis_distribution, canonical_point, enqueue_params, point_key
from klear_lab.sweep.identity import base_identity, config_changes
from klear_lab.sweep.spec import SweepSpec
from klear_lab.sweep.storage import StudyLock, current_study
from klear_lab.sweep.successor import spec_choices, widen_choices

COVERED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING, TrialState.WAITING)
BASE_ATTR, READY_ATTR = "klear.base", "klear.points"
CONFIGS = "configs"  # in BASE_ATTR: the hashed configs behind "config", to name what changed


def prepare_study(study: optuna.Study, spec: SweepSpec, arms: list[Arm], lock: StudyLock,
                  ) -> tuple[optuna.Study, int]:
    """Record the base config, enqueue missing grid points; return the study to run and how many were enqueued.

    The study returned is ``study``, or its successor when the grid spec added seeds or axis values.

    Raises:
        ConfigError: the study exists but was started from another base experiment/overrides; a
            ``tpe``/``random`` spec changed a categorical axis; a widened grid has running trials.
    """
    base = study_base(spec)
    with lock.hold():
        study = current_study(study)  # another sweep process may have widened it since we opened it
        check_same_base(study, spec, base=base)
        if spec.sampler == "grid":
            study = widen_choices(study, spec)
        else:
            check_choices_unchanged(study, spec)
        study.set_user_attr(BASE_ATTR, base)
        added = 0
        if spec.sampler == "grid":
            _drop_unwanted(study, spec, arms)
            added = _enqueue_missing(study, spec, arms)
        study.set_user_attr(READY_ATTR, trial_count(spec, arms))
    return study, added


def trial_count(spec: SweepSpec, arms: list[Arm]) -> int:
    """How many trials the sweep runs: each of the grid's ``arms`` x seeds, or a tpe/random sweep's n_trials."""
    return len(arms) * len(spec.seeds) if arms else spec.n_trials


def study_base(spec: SweepSpec, *, resolve: bool = True) -> dict[str, Any]:
    """What every trial of one study must share: the base experiment and overrides, what they resolve to
    (``config``: its hash, which covers the experiment file, the files it builds on and plugins' code), the
    sampler, the objective and the pruner (trials run, scored or pruned otherwise are not arms of one
    comparison), and the heartbeat interval (workers of one study must agree on when a trial is dead)."""
    base = {"experiment": str(spec.experiment.resolve()) if spec.experiment else None,
            "overrides": list(spec.overrides), "sampler": spec.sampler,
            "objective": f"{spec.metric} ({spec.direction})", "pruner": spec.pruner,
            "heartbeat_interval": spec.heartbeat_interval}
    if resolve:
        base["config"], base[CONFIGS] = base_identity(spec) if spec.experiment else (None, None)
    return base


def check_same_base(study: optuna.Study, spec: SweepSpec, *, joining: bool = False,
                    base: dict[str, Any] | None = None) -> None:
    """Refuse a spec whose base differs from the one the study was started with (:func:`study_base`).

    Keys a study recorded before they existed are not compared. A joiner (``--join``, maybe another
    machine with another checkout) is not compared on the experiment's path and resolved config. The
    resolved config may change while no trial has finished (a fix after every trial failed on it).
    ``base``: ``study_base(spec)``, where the caller has it.

    Raises:
        ConfigError: naming the keys that differ.
    """
    old, new = study.user_attrs.get(BASE_ATTR) or {}, base or study_base(spec, resolve=not joining)
    # a shorter heartbeat interval would call the other workers' live trials stale (the grace period is
    # two of one's own intervals) and run their retries beside them; with no trial running it may change
    skip = {"experiment"} if joining else set()
    if not joining and not count(study, (TrialState.RUNNING,)):
        skip.add("heartbeat_interval")
    if not count(study, (TrialState.COMPLETE, TrialState.PRUNED)):
        skip.add("config")
    differ = sorted(k for k in old.keys() & new.keys() - skip - {CONFIGS}
                    if _compared(k, old[k]) != _compared(k, new[k]))
    if "config" in differ:
        changed = config_changes(old[CONFIGS], new[CONFIGS]) if old.get(CONFIGS) and new.get(CONFIGS) else ""
        changed = changed or ("the experiment file, a file it builds on, its model.init_from experiment, a "
                              "plugin's code or klear-lab's defaults")
        differ[differ.index("config")] = (
            f"config (its hash was {old['config']}, now {new['config']}; changed since trials finished: "
            f"{changed}; undo the change to continue the study)")
    if study.direction.name.lower() != spec.direction:
        differ.append(f"direction (the study's is {study.direction.name.lower()})")
    if "heartbeat_interval" in differ and not joining:  # trials run: live workers, or a killed sweep's
        raise ConfigError(
            f"{spec.path}: heartbeat_interval: trials of study {spec.name!r} are running with "
            f"{old['heartbeat_interval']} s heartbeats and the spec says {new['heartbeat_interval']}; keep "
            f"{old['heartbeat_interval']} while they run (a killed sweep's trials count as running until a "
            "worker with that interval finds their heartbeats stale: run the sweep once with it, then change it)")
    if differ:
        shown = "; ".join(f"overrides: {_override_change(old[k], new[k])}" if k == "overrides" else
                          f"{k}: the study has {old[k]!r}, the spec {new[k]!r}" if k in new else k for k in differ)
        action = ("join with the spec and overrides the sweep was started with" if joining else
                  "rename the sweep (name: or --name) or delete its storage")
        raise ConfigError(f"{spec.path}: study {spec.name!r} was started with a different base ({shown}); {action}")


def computed_overrides(overrides: Any) -> Any:
    """The overrides that change what a trial computes. Those of keys the config hash leaves out
    (``tracking.IDENTITY_EXCLUDE``: torch threads, checkpoint spacing, log-prob chunks, run names) may
    change between runs of one study: adding ``trainer.num_threads=1`` to a rerun was refused."""
    from klear_lab.config.layers import override_key
    from klear_lab.tracking import IDENTITY_EXCLUDE

    if not isinstance(overrides, list):
        return overrides
    free = {".".join(key) for key in IDENTITY_EXCLUDE}
    return [o for o in overrides if override_key(str(o)) not in free]


def _compared(key: str, value: Any) -> Any:
    return computed_overrides(value) if key == "overrides" else value


def _override_change(old: Any, new: Any) -> str:
    """What a rerun's overrides changed: those removed and added, or their order (a later one wins)."""
    was, now = computed_overrides(old), computed_overrides(new)
    if not (isinstance(was, list) and isinstance(now, list)):
        return f"the study has {old!r}, the spec {new!r}"
    removed, added = [o for o in was if o not in now], [o for o in now if o not in was]
    parts = [f"{what} {items}" for what, items in (("removed", removed), ("added", added)) if items]
    return ", ".join(parts) or f"reordered (a later override wins): the study has {was}, the spec {now}"


def check_choices_unchanged(study: optuna.Study, spec: SweepSpec) -> None:
    """Refuse, before any trial is claimed, a ``tpe``/``random`` spec whose axis changed in a way Optuna
    refuses within a study: a categorical axis's choices, a range's ``log`` or int/float type.

    Optuna fixes these at a parameter's first trial in a study ("does not support dynamic value space"),
    so a trial of the changed spec would fail only once a worker had claimed it. The sampler draws
    from those choices, so unlike a grid (``successor.py``) they cannot be widened.

    Raises:
        ConfigError: naming the axis and what the study holds.
    """
    Categorical = optuna.distributions.CategoricalDistribution
    expected = {name: (key, Categorical(values)) for name, (key, values) in spec_choices(spec).items()}
    expected |= {axis.key: (axis.key, axis_distribution(axis)) for axis in spec.axes if axis.is_range}
    for trial in study.get_trials(deepcopy=False):
        for name in expected.keys() & trial.distributions.keys():
            (key, new), old = expected.pop(name), trial.distributions[name]
            try:  # Optuna's own rule, the one suggest_* would apply once a worker had claimed a trial
                optuna.distributions.check_distribution_compatibility(old, new)
            except ValueError as exc:
                was, now = (list(old.choices), list(new.choices)) if isinstance(old, Categorical) else (old, new)
                raise ConfigError(
                    f"{spec.path}: {key}: study {spec.name!r} was run with {was}, the spec now says {now} "
                    f"({exc}); Optuna cannot change this within a study: run the new spec as a new study "
                    f"(--name NEW) or delete {spec.sweep_dir}") from None
        if not expected:
            return


def _drop_unwanted(study: optuna.Study, spec: SweepSpec, arms: list[Arm]) -> None:
    """Fail the WAITING trials (left by an interrupted run, or retries) whose point the spec no longer
    has: a grid trimmed to save time ran them all the same. A point put back is enqueued again."""
    wanted = grid_points(spec, arms)
    storage = study._storage
    for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        if canonical_point(t.user_attrs.get("point")) not in wanted:
            storage.set_trial_user_attr(t._trial_id, "error", "dropped: the spec no longer has this point")
            storage.set_trial_state_values(t._trial_id, TrialState.FAIL)


def _enqueue_missing(study: optuna.Study, spec: SweepSpec, arms: list[Arm]) -> int:
    covered = points_in(study, COVERED)
    added = 0
    for arm in arms:
        for seed in spec.seeds:
            point = point_key(arm.params, seed)
            if point not in covered:
                attrs = {"arm": arm.label, "seed": seed, "point": point}
                study.enqueue_trial(enqueue_params(arm, seed), user_attrs=attrs)
                covered.add(point)
                added += 1
    return added


def grid_points(spec: SweepSpec, arms: list[Arm]) -> frozenset[str]:
    """The point keys of the grid's arms x seeds."""
    return frozenset(point_key(a.params, s) for a in arms for s in spec.seeds)


def points_in(study: optuna.Study, states: tuple[TrialState, ...] | None) -> set[str | None]:
    """The point keys of the study's trials in ``states`` (None: every trial), as written now."""
    return {canonical_point(t.user_attrs.get("point")) for t in study.get_trials(deepcopy=False, states=states)}


def count(study: optuna.Study, states: tuple[TrialState, ...]) -> int:
    """Number of trials in ``states``."""
    return len(study.get_trials(deepcopy=False, states=states))


def grid_status(study: optuna.Study) -> dict[str, int]:
    """Trials per state name, for progress lines."""
    out: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        out[t.state.name] = out.get(t.state.name, 0) + 1
    return out


def missing_points(study: optuna.Study, spec: SweepSpec, arms: list[Arm],
                   states: tuple[TrialState, ...] | None = (TrialState.COMPLETE, TrialState.PRUNED)) -> list[str]:
    """Grid points x seeds with no trial in ``states`` (default: none finished; ``None``: none at all,
    i.e. not enqueued yet)."""
    done = points_in(study, states)
    return [f"{a.label} seed={s}" for a in arms for s in spec.seeds if point_key(a.params, s) not in done]
