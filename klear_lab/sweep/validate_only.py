"""``klear-lab sweep SPEC --validate-only``'s report, once every check the run makes before its study passed: the
plan, what this machine could not run, and what running the spec would do to a study it already has."""

from __future__ import annotations

from typing import Any

from optuna.trial import TrialState

from klear_lab.errors import ConfigError
from klear_lab.sweep.data_checks import unavailable_machinery
from klear_lab.sweep.grid import Arm
from klear_lab.sweep.parents import planned_start
from klear_lab.sweep.queue import check_choices_unchanged, check_same_base, count
from klear_lab.sweep.spec import SweepSpec
from klear_lab.sweep.storage import NoStudyError, check_storage_opens, open_study
from klear_lab.sweep.successor import widening_note


def report_validated(spec: SweepSpec, arms: list[Arm], url: str, n_points: int, missing: list[str],
                     lacking: list[str], log: Any) -> int:
    """Log the OK line and its notes; refuse what a rerun of an existing study would refuse. Writes nothing.

    Raises:
        ConfigError: the study exists with another base, or a tpe/random axis it cannot take.
    """
    existing = _existing_study(spec, url, log)
    if existing is not None:  # a rerun continues it: a base or tpe/random axis it would refuse, so does this
        check_same_base(existing, spec)
        if spec.sampler != "grid":
            check_choices_unchanged(existing, spec)
    log(f"{spec.path}: OK: {trial_plan(spec, arms, n_points)}, objective {spec.metric} ({spec.direction})")
    if missing:
        log(f"note: data this machine cannot read, so trials here would fail: {'; '.join(missing)}")
    if lacking:
        log(f"note: rewards this machine cannot run, so trials here would fail: {'; '.join(lacking)}")
    models, engines = unavailable_machinery(spec, arms)  # as `train --dry-run` notes them; the run loads them
    if models:
        log(f"note: models this machine cannot load, so trials here would fail: {'; '.join(models)}")
    if engines:
        log(f"note: rollout engines this machine cannot start, so trials here would fail: {'; '.join(engines)}")
    if existing is not None:
        log(f"note: study {existing.study_name!r} exists ({count(existing, (TrialState.COMPLETE,))} trial(s) "
            f"complete): {widening_note(existing, spec) or 'running this spec continues it'}")
    if (start := planned_start(spec, spec.compose())) is not None:
        log(f"starting point (model.init_from): {start}")
    return 0


def trial_plan(spec: SweepSpec, arms: list[Arm], n_trials: int) -> str:
    """What the sweep will run (``n_trials``: :func:`trial_count`): ``3 arm(s) x 2 seed(s) = 6 trials, sampler
    grid``. A tpe/random sweep draws each trial's axis values and gives trial N seed ``seeds[N % len(seeds)]``
    (``claim.trial_values``): its n_trials are not arms x seeds ("5 arm(s) x 2 seed(s) = 5 trials" was said of one)."""
    if spec.sampler == "grid":
        return f"{len(arms)} arm(s) x {len(spec.seeds)} seed(s) = {n_trials} trials, sampler grid"
    per_seed = [len(range(i, n_trials, len(spec.seeds))) for i in range(len(spec.seeds))]
    seeds = ", ".join(f"{n} on seed {seed}" for seed, n in zip(spec.seeds, per_seed, strict=True) if n)
    return (f"{n_trials} trials, sampler {spec.sampler} (each draws its own axis values; seeds in turn by "
            f"trial number: {seeds})")


def _existing_study(spec: SweepSpec, url: str, log: Any) -> Any:
    """The spec's study if its storage already holds one (never created here), else None. A database server
    this machine cannot reach gets a note (the spec may be meant for a cluster's, as for its data and models).

    Raises:
        ConfigError: the run's own refusal of an SQLite storage it could not open or create (a file under /proc):
            "no such study yet" is fine, that is not.
    """
    try:
        check_storage_opens(url)
    except ConfigError as exc:
        if url.startswith("sqlite"):
            raise
        log(f"note: {exc}: a sweep run here would stop at once; not compared with a study there")
        return None
    try:
        return open_study(spec, url, create=False, heartbeat=False)
    except NoStudyError:
        return None

