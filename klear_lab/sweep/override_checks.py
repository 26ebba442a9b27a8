"""Overrides a sweep would drop without a word: of a key the sweep sets for every trial (``run.seed``...), of
the W&B project the spec's ``wandb: project:`` sets, and of what an axis sets. Each was saved in the study's
base though no trial ran with it, and a rerun without it was then refused as another base."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import warnings
from typing import Any

from klear_lab.config.layers import override_key
from klear_lab.errors import ConfigError
from klear_lab.sweep.grid import canonical_value, grid_arms, trial_layer
from klear_lab.sweep.probe import trial_points
from klear_lab.sweep.spec import SweepSpec

SWEEP_OWNED_KEYS = ("run.seed", "run.group", "run.job_type", "run.tags", "run.out_dir", "run.name",
                    "run.notes")
"""Set by the sweep for every trial; an axis on them would be overwritten (use ``seeds:``)."""


def check_owned_overrides(spec: SweepSpec) -> None:
    """An override of a key the sweep sets for every trial (``run.seed``, ``run.out_dir``...; the W&B project
    where the spec's ``wandb: project:`` names one) was dropped without a word, as an axis on one is refused."""
    own = len(spec.overrides) - len(spec.cli_overrides)
    for i, item in enumerate(spec.overrides):
        key = override_key(item)
        where = "command line" if i >= own else f"{spec.path}: overrides"
        if key in SWEEP_OWNED_KEYS:
            raise ConfigError(f"{where}: {item!r}: {key} is set by the sweep for each trial (replicates go in "
                              "seeds:, the output in out_dir:, the W&B group in wandb: group:)")
        if spec.wandb_project and _sets(item, "tracking.wandb.project"):
            raise ConfigError(f"{where}: {item!r}: the W&B project is set for each trial by {spec.path}'s "
                              f"`wandb: project: {spec.wandb_project}`: change it there")


def _sets(item: str, path: str) -> bool:
    """Whether the override ``item`` (``k=v``, or a section written whole) gives a value at ``path``."""
    from klear_lab.config.layers import dotlist_layer

    node: Any = dotlist_layer([item])[1]
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def check_axis_overrides(spec: SweepSpec, base: dict[str, Any]) -> None:
    """An override of what an axis sets for each trial was dropped without a word, yet saved in the study's base
    (a rerun without it was then refused): refuse one whose value a trial's config does not keep.

    Decided by composing the trials (each grid arm; tpe/random: each axis value, the others at their first)
    and comparing each leaf the override sets (``rl.clip=cispo``: ``rl.clip.name``) with the base's: an
    override of the axis key, a key under it or the section above it, or a parameter of the component the axis
    switches (``rl.clip.eps_high`` beside an axis on ``rl.clip.name``), is refused where a trial loses it, and
    allowed where every trial keeps it (another parameter of the same component). A field inside a list the
    override writes whole (``data.sources=[{name: file, path: P}]`` beside an axis on ``data.sources.0.path``)
    may be replaced, as long as the override still changes the trial (``name: file``): the item needs a value
    there.
    A section's field need not be given (``data.mix={name: top_k, k: 1, budget: 64}`` beside an axis on
    ``data.mix.budget``): the refusal says to leave it out.
    """
    own = len(spec.overrides) - len(spec.cli_overrides)
    related = [(i, item) for i, item in enumerate(spec.overrides) if _axes_near(spec, override_key(item))]
    trials = _trial_configs(spec) if related else []
    for i, item in related:
        leaves = _override_leaves(item, base)
        for label, values, cfg in trials:
            lost = [(path, inside) for path, inside in leaves if _differs(_at(cfg, path), _at(base, path))]
            if not lost or (len(lost) < len(leaves) and all(inside for _, inside in lost)
                            and _changes_the_trial(spec, i, values, cfg)):
                continue
            path = next((p for p, inside in lost if not inside), lost[0][0])
            axis, direct = _culprit(spec, item, path, values, base)
            how = (f"sets {path} for each trial" if direct
                   else "switches the component, whose parameters start from its defaults")
            where = "command line" if i >= own else f"{spec.path}: overrides"
            section = path == axis and path.startswith(f"{override_key(item)}.") and len(leaves) > 1
            todo = (f"leave {path} out of the override" if section
                    else f"change the values of `axes: {axis}` in {spec.path} instead")
            got = f"{path}={_at(cfg, path)!r}" if _at(cfg, path) is not None else f"no {path}"
            said = (f"{where}: {item!r}: the axis {axis} {how}, so trials would not run with this override (arm "
                    f"{label}: {got}, not {_at(base, path)!r})")
            if _recorded_in_study(spec, item):  # refused, its study could not be continued with it or without it
                warnings.warn(f"{said}; the study was started with it before such overrides were refused, so it is "
                              "kept: it changes nothing", UserWarning, stacklevel=2)
                break
            raise ConfigError(f"{said}, yet the study would record it in its base; {todo}")


def _culprit(spec: SweepSpec, item: str, path: str, values: dict[str, Any], base: dict[str, Any]) -> tuple[str, bool]:
    """The axis that takes ``path`` from the override in the arm of axis ``values``, and whether it sets
    ``path`` itself (else it switches the component ``path`` is a parameter of)."""
    near = _axes_near(spec, path) or _axes_near(spec, override_key(item))
    direct = [a for a in near if f"{path}.".startswith(f"{a}.") or a.startswith(f"{path}.")]
    if direct:
        return direct[0], True
    switching = [a for a in near if a in values and _differs(values[a], _at(base, a))]
    names = [a for a in switching if a.endswith(".name") or _node(a) == a]
    return (names or switching or near)[0], False


def _recorded_in_study(spec: SweepSpec, item: str) -> bool:
    """Whether the spec's study already exists with ``item`` among its base's overrides (started before such
    overrides were refused); only asked of a refused override. An unreadable storage counts as no study."""
    from klear_lab.sweep.queue import BASE_ATTR
    from klear_lab.sweep.storage import default_storage_url, open_study

    try:  # a missing SQLite file is no study, made by nothing here (open_study's own check)
        study = open_study(spec, default_storage_url(spec), create=False, heartbeat=False)
    except Exception:  # noqa: BLE001 - no such study, or a storage the run's own opening reports
        return False
    return item in ((study.user_attrs.get(BASE_ATTR) or {}).get("overrides") or [])


def _node(key: str) -> str:
    """The component node a key is in (``rl.clip`` for ``rl.clip.eps_high``), else the key."""
    from klear_lab.config.merge import component_paths

    return next((c for c in component_paths() if key == c or key.startswith(f"{c}.")), key)


def _axes_near(spec: SweepSpec, key: str) -> list[str]:
    """The axis keys that set ``key``, a key under or above it, or another key of the component it is in."""
    return [a.key for a in spec.axes if key == a.key or key.startswith(f"{a.key}.") or a.key.startswith(f"{key}.")
            or _node(key) == _node(a.key) != key]


def _changes_the_trial(spec: SweepSpec, i: int, values: dict[str, Any], cfg: dict[str, Any]) -> bool:
    """Whether the override ``spec.overrides[i]`` changes the config ``cfg`` of the trial of axis ``values``:
    composed without it, the trial differs where it writes. A list written whole whose only change is the
    field an axis sets (``data.sources=[{name: arith_r1, n_prompts: 99}]`` beside an axis on
    ``data.sources.0.n_prompts``) changes nothing: its other fields are what the trial had anyway. Its
    copies go with it (the same override in the spec and on the command line: each alone changes the trial)."""
    item = spec.overrides[i]
    without = dataclasses.replace(spec, overrides=[o for o in spec.overrides if o != item],
                                  cli_overrides=[o for o in spec.cli_overrides if o != item])
    try:
        before = _trial_config(without, values)
    except ConfigError:  # the trial needs it (a list item's required field): it changes the trial
        return True
    key = override_key(spec.overrides[i])
    return _differs(_at(cfg, key), _at(before, key))


def _trial_configs(spec: SweepSpec) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(arm label, axis values, composed config) of each trial the checks probe (``probe.trial_points``); one
    that does not compose is left to the checks that report it."""
    out = []
    for label, values in trial_points(spec, grid_arms(spec) if spec.sampler == "grid" else []):
        with contextlib.suppress(ConfigError):
            out.append((label, values, _trial_config(spec, values)))
    return out


def _trial_config(spec: SweepSpec, values: dict[str, Any]) -> dict[str, Any]:
    return spec.compose([trial_layer(spec, values, spec.seeds[0], None, None, "check")])


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
