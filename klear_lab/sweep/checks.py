"""Checks that run before any trial: axis keys and values, objective name, storage URL.

Every axis value is composed onto the base experiment through ``compose()`` (the same path a
trial takes; the other axes at their first value), then every grid arm is composed whole, so a
misspelt key, an unknown component or an out-of-range parameter stops the sweep with the spec
file and axis named.
"""

from __future__ import annotations

from typing import Any

from klear_lab.errors import ConfigError
from klear_lab.sweep.grid import Arm, axis_distribution, grid_arms, resolve_baseline, trial_layer
from klear_lab.sweep.spec import SweepSpec

METRIC_PREFIXES = ("val/", "train/", "perf/", "rl/", "reward/", "eval/", "test/", "data/", "plan/")
"""Namespaces run_experiment logs under (Lightning ``self.log`` names, summary.json keys)."""
KNOWN_METRICS = frozenset({"val/acc", "train/loss", "val/loss", "perf/tokens_per_s", "rl/reward_mean"})
"""Named here so the list of documented metrics has one home; any prefixed name is also accepted."""
SWEEP_OWNED_KEYS = ("run.seed", "run.group", "run.job_type", "run.tags", "run.out_dir", "run.name",
                    "run.notes")
"""Set by the sweep for every trial; an axis on them would be overwritten (use ``seeds:``)."""
MAX_COMPOSED_ARMS = 512


def check_spec(spec: SweepSpec) -> list[Arm]:
    """Run every pre-flight check; return the grid arms ([] for tpe/random).

    Raises:
        ConfigError: naming the spec file and the key at fault.
    """
    check_objective(spec)
    check_storage_url(spec.storage, spec)
    _check_base(spec)
    for axis in spec.axes:
        if axis.key in SWEEP_OWNED_KEYS or axis.key == "run":
            raise spec.err(f"axes.{axis.key}", "is set by the sweep itself (replicates go in seeds:)")
        if axis.is_range:
            try:
                axis_distribution(axis)
            except ValueError as exc:  # Optuna's rule: it raised in the first claimed trial
                raise spec.err(f"axes.{axis.key}", str(exc)) from None
        others = {a.key: _probe_values(a)[0] for a in spec.axes if a is not axis}
        for value in _probe_values(axis):
            context = f" (other axes at {others})" if others else ""
            _compose_or_raise(spec, {**others, axis.key: value}, f"axes.{axis.key}",
                              f"value {value!r}{context}")
    arms = grid_arms(spec) if spec.sampler == "grid" else []
    for arm in arms[:MAX_COMPOSED_ARMS]:
        _compose_or_raise(spec, arm.params, "axes", f"arm {arm.label}")
    resolve_baseline(spec, [a.label for a in arms])
    return arms


def check_objective(spec: SweepSpec) -> None:
    """The objective and table metrics must be names that runs log (see ``METRIC_PREFIXES``)."""
    named = [("objective.metric", spec.metric), *[(f"metrics[{i}]", m) for i, m in enumerate(spec.metrics)]]
    for key, name in named:
        if name not in KNOWN_METRICS and not name.startswith(METRIC_PREFIXES):
            raise spec.err(key, f"{name!r} is not a metric that runs log; expected a name starting with "
                                f"{', '.join(METRIC_PREFIXES)} (e.g. val/acc)")


def check_storage_url(url: str | None, spec: SweepSpec | None = None) -> None:
    """A parseable SQLAlchemy URL whose dialect and driver are installed (no connection made)."""
    if url is None:
        return
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    def fail(message: str) -> ConfigError:
        return spec.err("storage", message) if spec else ConfigError(f"storage: {message}")

    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise fail(f"{url!r} is not an SQLAlchemy URL ({exc}); e.g. sqlite:///study.db or "
                   "postgresql+psycopg://user@127.0.0.1:5432/db") from None
    try:
        parsed.get_dialect().import_dbapi()
    except (NoSuchModuleError, ImportError) as exc:
        raise fail(f"{url!r}: database driver not available: {exc}") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise fail(f"{url!r}: workers share the study through a file; give sqlite:///PATH")


def _check_base(spec: SweepSpec) -> None:
    if spec.experiment is not None and not spec.experiment.is_file():
        raise spec.err("experiment", f"{spec.experiment} not found")
    try:
        spec.compose()
    except ConfigError as exc:  # an error in the spec's own overrides already names the spec
        msg = str(exc)
        raise ConfigError(msg if msg.startswith(f"{spec.path}: ") else f"{spec.path}: base experiment: {msg}") from None


def _probe_values(axis: Any) -> list[Any]:
    if not axis.is_range:
        return list(axis.values)
    integer = isinstance(axis.step, int) or (isinstance(axis.low, int) and isinstance(axis.high, int))
    return [int(axis.low), int(axis.high)] if integer else [float(axis.low), float(axis.high)]


def _compose_or_raise(spec: SweepSpec, values: dict[str, Any], key: str, what: str) -> None:
    seed = spec.seeds[0]
    layer = trial_layer(spec, values, seed, None, None, "check")
    try:
        spec.compose([layer])
    except ConfigError as exc:
        raise spec.err(key, f"{what}: {exc}") from None
