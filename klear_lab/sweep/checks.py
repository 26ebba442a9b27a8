"""Checks that run before any trial: axis keys and values, overrides, objective name (the data: ``data_checks.py``).

Every axis value is composed onto the base experiment through ``compose()`` (the same path a
trial takes; the other axes at their first value), then every grid arm is composed whole, so a
misspelt key, an unknown component or an out-of-range parameter stops the sweep with the spec
file and axis named. Each composed config also goes through the refusals ``klear-lab train``
makes before it loads a model (``runnable_problem``) and those of its data that its config alone decides
(``dry_run_data.data_problems``, as ``train --dry-run``): a config every trial would fail on.
"""

from __future__ import annotations

import json
from typing import Any

from klear_lab.errors import ConfigError
from klear_lab.runnable import runnable_problem
from klear_lab.sweep.baseline_checks import check_drawable_baseline, check_label_hint
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
from klear_lab.sweep.override_checks import SWEEP_OWNED_KEYS, check_axis_overrides, check_owned_overrides
from klear_lab.sweep.probe import MAX_COMPOSED_ARMS, probe_values
from klear_lab.sweep.spec import DEFAULT_RUNNER, SweepSpec
from klear_lab.sweep.spec_parse import check_runner

METRIC_PREFIXES = ("val/", "train/", "perf/", "rl/", "reward/", "eval/", "test/", "data/", "plan/")
"""Namespaces a custom runner's metrics must use (``run_experiment``'s names are checked one by one)."""


def check_spec(spec: SweepSpec, arms: list[Arm] | None = None) -> list[Arm]:
    """Run every pre-flight check; return the grid arms ([] for tpe/random): ``arms`` where the caller
    built them already (``grid_arms``; ``run_sweep`` checks their run directories' names first).

    Raises:
        ConfigError: naming the spec file and the key at fault.
    """
    from klear_lab.sweep.storage import check_storage_url  # optuna's import: not for the lighter checks' users

    check_storage_url(spec.storage, spec)
    if spec.experiment is None and spec.runner == DEFAULT_RUNNER:  # trials of klear-lab's defaults alone
        raise spec.err("experiment", "missing: a sweep's trials run `klear-lab train EXPERIMENT` with the axes' "
                       "values, and without one they ran the built-in defaults (and its --wandb-export's command "
                       "took the first override for a file); name it, e.g. `experiment: ../experiments/quickstart/"
                       "rl.yaml` (relative to the spec)")
    check_runner(spec)
    check_label_hint(spec)  # `baseline: lr=1e-3`: did you mean lr=0.001? (a saved spec's is not refused again)
    check_owned_overrides(spec)
    base = _check_base(spec)
    check_axis_overrides(spec, base)
    clips = _configured_clips(spec, base) if base.get("plugins") and base["run"]["kind"] == "rl" else None
    check_objective(spec, base["run"]["kind"], plugins=bool(base.get("plugins")), clips=clips)
    inherited = trial_problem(base)  # reported as the base's when an arm has it (no axis is at fault)
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


def _check_base(spec: SweepSpec) -> dict[str, Any]:
    if spec.experiment is not None and not spec.experiment.is_file():
        raise spec.err("experiment", f"{spec.experiment} not found")
    try:
        cfg = spec.compose()
    except ConfigError as exc:  # an error in the spec's own overrides already names the spec
        msg = str(exc)
        raise ConfigError(msg if msg.startswith(f"{spec.path}: ") else f"{spec.path}: base experiment: {msg}") from None
    return cfg


def trial_problem(cfg: dict[str, Any]) -> str | None:
    """Why a trial of ``cfg`` would stop before training (:func:`runnable_problem`), a refusal of its data that
    its config alone decides (``dry_run_data.data_problems``, as ``train --dry-run`` says it: a ``top_k`` cut
    between sources of one rank, a ``weighted`` key naming no source, held-out sources named alike), or an RL
    component of it (a plugin's, usually) that breaks its axis' contract on tiny tensors, as the run probes them
    first (``dry_run.probe_rl_components``; its rollout engine too), or, of an SFT or eval run, an ``eval.engine:
    rollout`` engine it refuses (:func:`_eval_engine_problem`): each trial failed on it alike, as a config error,
    once it started."""
    from klear_lab.dry_run_data import data_problems

    if problem := runnable_problem(cfg):
        return problem
    if found := data_problems(cfg):
        return found[0][1]
    if cfg["run"]["kind"] != "rl":
        return _eval_engine_problem(cfg)
    from klear_lab.errors import ComponentError
    from klear_lab.rl.probes import probe_rl_components

    try:
        probe_rl_components(cfg["rl"])
    except ComponentError as exc:
        return str(exc)
    return None


def _eval_engine_problem(cfg: dict[str, Any]) -> str | None:
    """The run's refusal of its ``eval.engine: rollout`` engine as it starts (``builders.eval_engine``: a plugin
    engine without a ``start(model, tokenizer)``, several devices), in its words: what ``train --dry-run``'s
    evaluation row says NOT SUPPORTED of. An engine whose package is not here is noted, not refused
    (``data_checks.unavailable_machinery``); an RL run's own engine is probed with its components."""
    from klear_lab.dry_run import UNSUPPORTED, eval_row

    said = eval_row(cfg)[1]
    return said[said.index(UNSUPPORTED) + len(UNSUPPORTED) + 2:] if UNSUPPORTED in said else None


def _compose_or_raise(spec: SweepSpec, values: dict[str, Any], key: str, what: str,
                      inherited: str | None = None) -> None:
    """Compose one trial's config and ask :func:`runnable_problem` of it; a problem the base experiment
    has too (``inherited``) is the base's, not the axis value's. The base alone is not refused: an axis
    (say ``trainer.strategy``) may be what makes it runnable."""
    seed = spec.seeds[0]
    layer = trial_layer(spec, values, seed, None, None, "check")
    try:
        problem = trial_problem(spec.compose([layer]))
    except ConfigError as exc:  # an unknown key is the key's fault, whatever the value (and maybe another axis's)
        blamed = unknown_axis(spec, str(exc))
        raise spec.err(blamed or key, str(exc) if blamed or "unknown key" in str(exc) else f"{what}: {exc}") from None
    if problem and problem == inherited:
        raise ConfigError(f"{spec.path}: base experiment: every trial would stop before training: {problem}")
    if problem:
        raise spec.err(key, f"{what}: {problem}")
