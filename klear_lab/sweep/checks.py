"""Checks that run before any trial: axis keys and values, overrides, objective name (the data: ``data_checks.py``).

Every axis value is composed onto the base experiment through ``compose()`` (the same path a
trial takes; the other axes at their first value), then every grid arm is composed whole, so a
misspelt key, an unknown component or an out-of-range parameter stops the sweep with the spec
file and axis named. Each composed config also goes through the refusals ``klear-lab train``
makes before it loads a model (``runnable_problem``): a config every trial would fail on.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from klear_lab.config.layers import override_key
from klear_lab.errors import ConfigError
from klear_lab.sweep.baseline_checks import check_drawable_baseline
from klear_lab.sweep.blame import check_trial_settings, unknown_axis
from klear_lab.sweep.grid import (
    Arm,
    axis_distribution,
    canonical_value,
    encode,
    grid_arms,
    resolve_baseline,
    trial_layer,
)
from klear_lab.sweep.metrics import clip_metric_names, is_logged, unlogged_message
from klear_lab.sweep.spec import DEFAULT_RUNNER, SweepSpec
from klear_lab.sweep.spec_parse import check_runner

METRIC_PREFIXES = ("val/", "train/", "perf/", "rl/", "reward/", "eval/", "test/", "data/", "plan/")
"""Namespaces a custom runner's metrics must use (``run_experiment``'s names are checked one by one)."""
SWEEP_OWNED_KEYS = ("run.seed", "run.group", "run.job_type", "run.tags", "run.out_dir", "run.name",
                    "run.notes")
"""Set by the sweep for every trial; an axis on them would be overwritten (use ``seeds:``)."""
MAX_COMPOSED_ARMS = 512


def check_spec(spec: SweepSpec, arms: list[Arm] | None = None) -> list[Arm]:
    """Run every pre-flight check; return the grid arms ([] for tpe/random): ``arms`` where the caller
    built them already (``grid_arms``; ``run_sweep`` checks their run directories' names first).

    Raises:
        ConfigError: naming the spec file and the key at fault.
    """
    from klear_lab.sweep.storage import check_storage_url  # optuna's import: not for the lighter checks' users

    check_storage_url(spec.storage, spec)
    check_runner(spec)
    check_owned_overrides(spec)
    base = _check_base(spec)
    check_axis_overrides(spec, base)
    clips = _configured_clips(spec, base) if base.get("plugins") and base["run"]["kind"] == "rl" else None
    check_objective(spec, base["run"]["kind"], plugins=bool(base.get("plugins")), clips=clips)
    inherited = runnable_problem(base)  # reported as the base's when an arm has it (no axis is at fault)
    check_trial_settings(spec)
    for axis in spec.axes:
        if axis.key in SWEEP_OWNED_KEYS or axis.key == "run":
            raise spec.err(f"axes.{axis.key}", "is set by the sweep itself (replicates go in seeds:)")
        if axis.is_range:
            try:
                axis_distribution(axis)
            except ValueError as exc:  # Optuna's rule: it raised in the first claimed trial
                raise spec.err(f"axes.{axis.key}", str(exc)) from None
        else:
            _check_distinct(spec, axis)
        others = {a.key: probe_values(a)[0] for a in spec.axes if a is not axis}
        for value in probe_values(axis):
            context = f" (other axes at {others})" if others else ""
            _compose_or_raise(spec, {**others, axis.key: value}, f"axes.{axis.key}",
                              f"value {value!r}{context}", inherited)
    if arms is None:
        arms = grid_arms(spec) if spec.sampler == "grid" else []
    for arm in arms[:MAX_COMPOSED_ARMS]:
        _compose_or_raise(spec, arm.params, "axes", f"arm {arm.label}", inherited)
    resolve_baseline(spec, [a.label for a in arms])
    if spec.sampler != "grid":
        check_drawable_baseline(spec)
    return arms


def _check_distinct(spec: SweepSpec, axis: Any) -> None:
    """Values written differently but equal as config values (``1`` and ``1.0``) are one grid point."""
    seen: dict[str, Any] = {}
    for value in axis.values:
        key = json.dumps(canonical_value(encode(value)), sort_keys=True)
        if key in seen:
            raise spec.err(f"axes.{axis.key}", f"values {seen[key]!r} and {value!r} are the same config value")
        seen[key] = value


def _configured_clips(spec: SweepSpec, base: dict[str, Any]) -> list[dict[str, Any]]:
    """The clip nodes trials configure: the base's, and each value of an ``rl.clip`` axis (a plugin clip's
    statistics may depend on its parameters). A value that does not compose is the axis check's to report."""
    nodes = [base["rl"]["clip"]]
    for axis in spec.axes:
        if axis.key == "rl.clip" or axis.key.startswith("rl.clip."):
            for value in probe_values(axis):
                try:
                    layer = trial_layer(spec, {axis.key: value}, spec.seeds[0], None, None, "check")
                    nodes.append(spec.compose([layer])["rl"]["clip"])
                except ConfigError:
                    pass
    return nodes


def check_objective(spec: SweepSpec, kind: str, plugins: bool = False,
                    clips: list[dict[str, Any]] | None = None) -> None:
    """The objective and table metrics must be names that runs of ``kind`` log (``metrics.py``): a trial
    whose objective is missing fails only once it has trained.

    A custom ``runner:`` returns metrics of its own: only their namespace (``METRIC_PREFIXES``) is checked.
    With plugins loaded, a plugin clip variant's statistics are logged as ``rl/<key>``: the names every
    registered clip returns at its defaults, and each clip the trials configure (``clips``), are asked of
    them (``clip_metric_names``); where one cannot be asked, names under ``rl/`` get the namespace check only.
    A refused name's did-you-mean considers the plugins' names too.
    """
    clip_names = clip_metric_names(clips or []) if plugins and kind == "rl" else set()
    named = [("objective.metric", spec.metric), *[(f"metrics[{i}]", m) for i, m in enumerate(spec.metrics)]]
    for key, name in named:
        if name in (clip_names or ()):
            continue
        if spec.runner != DEFAULT_RUNNER or (clip_names is None and name.startswith("rl/")):
            if not name.startswith(METRIC_PREFIXES):
                raise spec.err(key, f"{name!r} is not a metric that runs log; expected a name starting with "
                                    f"{', '.join(METRIC_PREFIXES)} (e.g. val/acc)")
        elif not is_logged(name, kind):
            raise spec.err(key, unlogged_message(name, kind, clip_names or ()))


def runnable_problem(cfg: dict[str, Any]) -> str | None:
    """Why ``klear-lab train`` would refuse ``cfg`` before loading a model (None: it would not): Lightning
    refusing its trainer settings here, or an RL config that cannot run on its devices.

    The stage's own check (``prepare_rl`` calls ``multi_device_rl_problem`` first), so a sweep whose
    arms cannot run stops before a study exists instead of failing every trial. ``strategy: auto`` is
    checked as the trial process sees it: a fresh, non-interactive process (DDP), even when this sweep
    runs in a notebook.
    """
    if cfg["run"]["kind"] not in ("sft", "rl"):
        return None
    if cfg["run"]["kind"] == "rl":
        from klear_lab.distributed import multi_device_rl_problem

        ddp = {**cfg["trainer"], "strategy": "ddp"} if cfg["trainer"]["strategy"] == "auto" else cfg["trainer"]
        if problem := multi_device_rl_problem({**cfg, "trainer": ddp}):
            return problem
    return _trainer_problem(cfg["trainer"])


_TRAINER_DEFAULTS = ("auto", "1", "auto", "32-true")  # trains on any machine: Lightning is not imported for it
_TRAINER_PROBLEMS: dict[tuple[str, ...], str | None] = {}


def _trainer_problem(trainer: dict[str, Any]) -> str | None:
    """Lightning's refusal of the trainer's accelerator/devices/strategy/precision on this machine
    (``stages.common.check_trainer``, which each trial calls first: ``trainer.devices=-1`` on a CPU), once
    per combination. Not for an accelerator named outright (``gpu``): a GPU spec validated on a laptop passes,
    as the paper-scale specs must; its trials say "no GPU" if it is run there."""
    if str(trainer["accelerator"]) not in ("auto", "cpu"):
        return None
    settings = tuple(str(trainer[k]) for k in ("accelerator", "devices", "strategy", "precision"))
    if settings == _TRAINER_DEFAULTS:
        return None
    if settings not in _TRAINER_PROBLEMS:
        from klear_lab.stages.common import check_trainer

        try:
            check_trainer({"trainer": trainer})
            _TRAINER_PROBLEMS[settings] = None
        except ConfigError as exc:
            _TRAINER_PROBLEMS[settings] = str(exc)
    return _TRAINER_PROBLEMS[settings]


def _check_base(spec: SweepSpec) -> dict[str, Any]:
    if spec.experiment is not None and not spec.experiment.is_file():
        raise spec.err("experiment", f"{spec.experiment} not found")
    try:
        cfg = spec.compose()
    except ConfigError as exc:  # an error in the spec's own overrides already names the spec
        msg = str(exc)
        raise ConfigError(msg if msg.startswith(f"{spec.path}: ") else f"{spec.path}: base experiment: {msg}") from None
    return cfg


def probe_values(axis: Any) -> list[Any]:
    if not axis.is_range:
        return list(axis.values)
    integer = isinstance(axis.step, int) or (isinstance(axis.low, int) and isinstance(axis.high, int))
    return [int(axis.low), int(axis.high)] if integer else [float(axis.low), float(axis.high)]


def check_owned_overrides(spec: SweepSpec) -> None:
    """An override of a key the sweep sets for every trial (``run.seed``, ``run.out_dir``...) was dropped
    without a word, as an axis on one is refused."""
    own = len(spec.overrides) - len(spec.cli_overrides)
    for i, item in enumerate(spec.overrides):
        key = override_key(item)
        if key in SWEEP_OWNED_KEYS:
            where = "command line" if i >= own else f"{spec.path}: overrides"
            raise ConfigError(f"{where}: {item!r}: {key} is set by the sweep for each trial (replicates go in "
                              "seeds:, the output in out_dir:, the W&B group in wandb: group:)")


def check_axis_overrides(spec: SweepSpec, base: dict[str, Any]) -> None:
    """An override of what an axis sets for each trial was dropped without a word, yet saved in the study's base
    (a rerun without it was then refused): refuse one whose value a trial's config does not keep.

    Decided by composing the trials (each grid arm; tpe/random: each axis value, the others at their first)
    and comparing each leaf the override sets (``rl.clip=cispo``: ``rl.clip.name``) with the base's: an
    override of the axis key, a key under it or the section above it, or a parameter of the component the axis
    switches (``rl.clip.eps_high`` beside an axis on ``rl.clip.name``), is refused where a trial loses it, and
    allowed where every trial keeps it (another parameter of the same component). A field inside a list the
    override writes whole (``data.sources=[{name: file, path: P}]`` beside an axis on ``data.sources.0.path``)
    may be replaced, as long as the trial keeps something else of the override: the item needs a value there.
    A section's field need not be given (``data.mix={name: top_k, k: 1, budget: 64}`` beside an axis on
    ``data.mix.budget``): the refusal says to leave it out.
    """
    own = len(spec.overrides) - len(spec.cli_overrides)
    related = [(i, item) for i, item in enumerate(spec.overrides) if _axes_near(spec, override_key(item))]
    trials = _trial_configs(spec) if related else []
    for i, item in related:
        leaves = _override_leaves(item, base)
        for label, cfg in trials:
            lost = [(path, inside) for path, inside in leaves if _differs(_at(cfg, path), _at(base, path))]
            if not lost or (len(lost) < len(leaves) and all(inside for _, inside in lost)):
                continue
            path = next((p for p, inside in lost if not inside), lost[0][0])
            axis = (_axes_near(spec, path) or _axes_near(spec, override_key(item)))[0]
            how = (f"sets {path} for each trial" if f"{path}.".startswith(f"{axis}.") or axis.startswith(f"{path}.")
                   else "switches the component, whose parameters start from its defaults")
            where = "command line" if i >= own else f"{spec.path}: overrides"
            section = path == axis and path.startswith(f"{override_key(item)}.") and len(leaves) > 1
            todo = (f"leave {path} out of the override" if section
                    else f"change the values of `axes: {axis}` in {spec.path} instead")
            raise ConfigError(
                f"{where}: {item!r}: the axis {axis} {how}, so trials would not run with this override (arm "
                f"{label}: {path}={_at(cfg, path)!r}, not {_at(base, path)!r}), yet the study would record it in "
                f"its base; {todo}")


def _axes_near(spec: SweepSpec, key: str) -> list[str]:
    """The axis keys that set ``key``, a key under or above it, or another key of the component it is in."""
    from klear_lab.config.merge import component_paths

    def node(k: str) -> str:  # the component node a key is in (``rl.clip`` for ``rl.clip.eps_high``), else k
        return next((c for c in component_paths() if k == c or k.startswith(f"{c}.")), k)

    return [a.key for a in spec.axes if key == a.key or key.startswith(f"{a.key}.") or a.key.startswith(f"{key}.")
            or node(key) == node(a.key) != key]


def _trial_configs(spec: SweepSpec) -> list[tuple[str, dict[str, Any]]]:
    """(arm label, composed config) of each grid arm (tpe/random: each axis value, the others at their first);
    one that does not compose is left to the checks that report it."""
    if spec.sampler == "grid":
        points = [(arm.label, arm.params) for arm in grid_arms(spec)[:MAX_COMPOSED_ARMS]]
    else:
        first = {a.key: probe_values(a)[0] for a in spec.axes}
        points = [(f"{a.key}={v!r}", {**first, a.key: v}) for a in spec.axes for v in probe_values(a)]
    out = []
    for label, values in points:
        with contextlib.suppress(ConfigError):
            out.append((label, spec.compose([trial_layer(spec, values, spec.seeds[0], None, None, "check")])))
    return out


def _override_leaves(item: str, base: dict[str, Any]) -> list[tuple[str, bool]]:
    """(dotted path, inside a list) of each value ``item`` sets; a component shorthand is its ``.name``."""
    from klear_lab.config.layers import dotlist_layer

    leaves: list[tuple[str, bool]] = []

    def walk(node: Any, path: str, in_list: bool) -> None:
        if isinstance(node, dict) and node:
            for k, v in node.items():
                walk(v, f"{path}.{k}" if path else str(k), in_list)
        elif isinstance(node, list) and node:
            for j, v in enumerate(node):
                walk(v, f"{path}.{j}", True)
        else:
            shorthand = isinstance(node, str) and isinstance(_at(base, path), dict)
            leaves.append((f"{path}.name" if shorthand else path, in_list))

    walk(dotlist_layer([item])[1], "", False)
    return leaves


def _at(cfg: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(cfg, list) and part.isdigit() and int(part) < len(cfg):
            cfg = cfg[int(part)]
        else:
            cfg = cfg.get(part) if isinstance(cfg, dict) else None
    return cfg


def _differs(a: Any, b: Any) -> bool:
    return json.dumps(canonical_value(a), sort_keys=True, default=str) != \
        json.dumps(canonical_value(b), sort_keys=True, default=str)


def _compose_or_raise(spec: SweepSpec, values: dict[str, Any], key: str, what: str,
                      inherited: str | None = None) -> None:
    """Compose one trial's config and ask :func:`runnable_problem` of it; a problem the base experiment
    has too (``inherited``) is the base's, not the axis value's. The base alone is not refused: an axis
    (say ``trainer.strategy``) may be what makes it runnable."""
    seed = spec.seeds[0]
    layer = trial_layer(spec, values, seed, None, None, "check")
    try:
        problem = runnable_problem(spec.compose([layer]))
    except ConfigError as exc:  # an unknown key is the key's fault, whatever the value (and maybe another axis's)
        blamed = unknown_axis(spec, str(exc))
        raise spec.err(blamed or key, str(exc) if blamed or "unknown key" in str(exc) else f"{what}: {exc}") from None
    if problem and problem == inherited:
        raise ConfigError(f"{spec.path}: base experiment: every trial would stop before training: {problem}")
    if problem:
        raise spec.err(key, f"{what}: {problem}")
