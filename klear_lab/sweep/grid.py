"""Arms (one combination of axis values), their labels, Optuna parameter encoding and trial layers.

An arm's label names its axis values compactly (``clip=gppo``, ``k=top2,lr=0.001``); the sweep
uses it as the W&B ``job_type`` and the comparison table's row. A trial is an arm plus a seed;
its config is the base experiment plus one last layer labelled ``sweep trial N``.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from klear_lab.sweep.axes import Axis
from klear_lab.sweep.spec import SweepSpec

Layer = tuple[str, dict[str, Any]]
PRIMITIVES = (str, int, float, bool, type(None))
SEED_PARAM = "run.seed"


@dataclass(frozen=True)
class Arm:
    """One combination of axis values: ``values`` maps config key -> value (decoded)."""

    label: str
    values: tuple[tuple[str, Any], ...]

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.values)


def short_names(axes: list[Axis]) -> dict[str, str]:
    """Axis key -> short column name: the last key segment (``rl.clip.name`` -> ``clip``)."""
    short = {}
    for axis in axes:
        parts = axis.key.split(".")
        short[axis.key] = parts[-2] if parts[-1] == "name" and len(parts) > 1 else parts[-1]
    if len(set(short.values())) != len(short):
        return {a.key: a.key for a in axes}
    return short


def value_label(axis: Axis, value: Any, digits: int = 4) -> str:
    """Display label of one axis value (its ``labels`` entry, else the value itself, a float to ``digits``
    significant digits)."""
    if not axis.is_range:
        for v, label in zip(axis.values, axis.labels, strict=True):
            if encode(v) == encode(value):
                return label
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)


def arm_label(axes: list[Axis], values: dict[str, Any], digits: int = 4) -> str:
    """``clip=gppo`` for one axis, ``k=top2,lr=0.001`` for several."""
    short = short_names(axes)
    return ",".join(f"{short[a.key]}={value_label(a, values[a.key], digits)}" for a in axes)


def distinct_labels(axes: list[Axis], labels: dict[str, str], points: dict[str, dict[str, Any]]) -> dict[str, str]:
    """``labels`` (arm key -> label) with the arms that share a label relabelled from their axis values
    (``points``: arm key -> values) with more digits until no two differ only past the 4th digit
    (lr 0.00012341 and 0.00012344 both print ``lr=0.0001234``). 17 digits tell any two floats apart."""
    labels = dict(labels)
    for digits in range(5, 18):
        shared = {label for label, n in Counter(labels.values()).items() if n > 1}
        if not shared:
            break
        for key in [k for k, label in labels.items() if label in shared and k in points]:
            labels[key] = arm_label(axes, points[key], digits)
    return labels


def grid_arms(spec: SweepSpec) -> list[Arm]:
    """Every combination of the categorical axes, in spec order (last axis varies fastest)."""
    combos = itertools.product(*[axis.values for axis in spec.axes])
    arms = []
    for combo in combos:
        values = {axis.key: v for axis, v in zip(spec.axes, combo, strict=True)}
        arms.append(Arm(arm_label(spec.axes, values), tuple(values.items())))
    return arms


def encode(value: Any) -> Any:
    """Optuna categorical choices must be primitives: lists/dicts travel as JSON strings."""
    return value if isinstance(value, PRIMITIVES) else "json:" + json.dumps(value, sort_keys=True)


def decode(value: Any) -> Any:
    """Inverse of :func:`encode`."""
    if isinstance(value, str) and value.startswith("json:"):
        return json.loads(value[5:])
    return value


def point_key(values: dict[str, Any], seed: int) -> str:
    """Identity of one grid point x seed (a trial user attr; the resume bookkeeping key)."""
    return json.dumps({**{k: canonical_value(encode(v)) for k, v in values.items()}, SEED_PARAM: seed}, sort_keys=True)


def arm_point(key: str | None, axes: list[Axis]) -> dict[str, Any] | None:
    """The axis values (decoded) of a stored ``point`` attr, its seed left out; None without a point or
    when it lacks one of ``axes``."""
    try:
        values = {k: decode(v) for k, v in json.loads(key).items() if k != SEED_PARAM}
    except (TypeError, ValueError, AttributeError):  # None, or not a point key
        return None
    return values if all(a.key in values for a in axes) else None


def canonical_point(key: str | None) -> str | None:
    """A stored ``point`` attr as :func:`point_key` writes it now (studies from before kept 0 and 0.0 apart)."""
    try:
        return json.dumps({k: canonical_value(v) for k, v in json.loads(key).items()}, sort_keys=True)
    except (TypeError, ValueError, AttributeError):  # None, or not a point key
        return key


def canonical_value(value: Any) -> Any:
    """One form per value: YAML types ``1`` and ``1.0`` (``[1, 2]`` and ``[1.0, 2.0]``) by how they are
    written, but they are one config value, so one grid point."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [canonical_value(v) for v in value]
    if isinstance(value, dict):
        return {k: canonical_value(v) for k, v in value.items()}
    if isinstance(value, str) and value.startswith("json:"):
        return "json:" + json.dumps(canonical_value(json.loads(value[5:])), sort_keys=True)
    return value


def enqueue_params(arm: Arm, seed: int) -> dict[str, Any]:
    """Optuna params for ``study.enqueue_trial``: encoded axis values plus the seed."""
    return {**{k: encode(v) for k, v in arm.values}, SEED_PARAM: seed}


def _as_label(raw: str, labels: list[str]) -> str:
    """``optim.weight_decay=0.3``, an override's form, for the arm labelled ``weight_decay=0.3``: say so."""
    key, _, value = raw.partition("=")
    short = f"{key.rsplit('.', 1)[-1]}={value}"
    if short in labels:
        return f" (did you mean {short!r}? a label names an axis by its last part; or give {{{key}: {value}}})"
    return ""


def resolve_baseline(spec: SweepSpec, labels: list[str]) -> str | None:
    """The baseline arm's label: ``baseline:`` as a label or as {axis key: value}; default first arm."""
    raw = spec.baseline
    if raw is None:
        return labels[0] if labels else None
    if isinstance(raw, str):
        if labels and raw not in labels:
            raise spec.err("baseline", f"no arm is labelled {raw!r}; arms: {', '.join(labels)}{_as_label(raw, labels)}")
        return raw
    if not isinstance(raw, dict):
        raise spec.err("baseline", f"expected an arm label or {{axis key: value}}, got {flow_yaml(raw)}")
    keys = {a.key for a in spec.axes}
    for key in raw:
        if key not in keys:
            raise spec.err(f"baseline.{key}", f"not an axis of this sweep (axes: {', '.join(sorted(keys))})")
    if set(raw) != keys:
        missing = sorted(keys - set(raw))
        raise spec.err("baseline", f"give a value for every axis; missing {', '.join(missing)}")
    label = arm_label(spec.axes, raw)
    if labels and label not in labels:  # a grid's arms: tpe/random callers pass none (baseline_table matches points)
        raise spec.err("baseline", f"{flow_yaml(raw)} is not a grid point (arms: {', '.join(labels)})")
    return label


def flow_yaml(value: Any) -> str:
    """``value`` on one line as YAML writes it (``{optim.lr: 0.001, trainer.deterministic: false}``), as a spec or
    ``--baseline`` gives it; Python's ``str`` wrote ``False`` and ``{'a': 1}``."""
    import yaml

    return yaml.safe_dump(value, default_flow_style=True, width=1 << 30, sort_keys=False).removesuffix("...\n").strip()


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    """``{"rl.clip.name": "gppo"}`` -> ``{"rl": {"clip": {"name": "gppo"}}}``.

    A component shorthand (``rl.clip: gppo``) next to one of its params becomes ``{name: gppo, ...}``.
    """
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if isinstance(child, str):
                child = {"name": child}
            node[part] = child if isinstance(child, dict) else {}
            node = node[part]
        last = parts[-1]
        if isinstance(node.get(last), dict) and isinstance(value, str):
            node[last]["name"] = value
        else:
            node[last] = value
    return out


def trial_run_name(spec: SweepSpec, label: str) -> str:
    """``run.name`` of the trials of the arm labelled ``label``: ``<sweep>-<label>``, in characters safe
    anywhere (``lr=0.001,k=2`` -> ``toy-lr-0.001_k-2``)."""
    return re.sub(r"[^A-Za-z0-9_.+-]", "-", f"{spec.name}-{label}".replace(",", "_"))


def trial_layer(spec: SweepSpec, values: dict[str, Any], seed: int, number: int | None,
                threads: int | None, label: str) -> Layer:
    """The last config layer of one trial: axis values, seed, W&B naming, output dir, threads."""
    flat: dict[str, Any] = dict(values)
    tags = [f"{a.key}={value_label(a, values[a.key])}" for a in spec.axes if a.key in values]
    flat.update({
        SEED_PARAM: seed,
        "run.name": trial_run_name(spec, label),
        "run.group": spec.wandb_group or spec.name,
        "run.job_type": label,
        "run.tags": [*tags, f"sweep={spec.name}"],  # every run tags its seed (``seed:N``, tracking.component_tags)
        "run.notes": f"sweep {spec.name} trial {number}",
        "run.out_dir": str(spec.runs_dir),
    })
    if spec.wandb_project:
        flat["tracking.wandb.project"] = spec.wandb_project
    if threads and "trainer.num_threads" not in values:  # an axis on it is the sweep's subject: kept
        flat["trainer.num_threads"] = threads
    return f"sweep trial {number}" if number is not None else "sweep axes", nest(flat)


def axis_distribution(axis: Any) -> Any:
    """The distribution a range axis's values are drawn from (int when its bounds and step are ints).

    Raises:
        ValueError: Optuna refuses it (log with a bound <= 0, log with a step...).
    """
    import optuna

    if is_int_range(axis):
        return optuna.distributions.IntDistribution(int(axis.low), int(axis.high), log=axis.log,
                                                    step=int(axis.step or 1))
    return optuna.distributions.FloatDistribution(axis.low, axis.high, log=axis.log, step=axis.step)


def is_int_range(axis: Any) -> bool:
    return isinstance(axis.low, int) and isinstance(axis.high, int) and (axis.step is None or
                                                                          isinstance(axis.step, int))
