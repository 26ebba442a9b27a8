"""Checks of a sweep's baseline: a tpe/random sweep's ``baseline:`` must be an arm its sampler can draw
(checked before any trial); ``compare --baseline`` is read as ``baseline:`` is (:func:`cli_baseline`); a label
whose numbers are an arm's written another way (``lr=1e-3`` for ``lr=0.001``) gets a did-you-mean
(:func:`label_hint`)."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

import yaml

from klear_lab.errors import ConfigError
from klear_lab.sweep.grid import arm_label, axis_distribution, canonical_value, encode, grid_arms, resolve_baseline
from klear_lab.sweep.spec import SweepSpec

MAX_LABELLED_ARMS = 10_000
"""A label baseline of a tpe/random sweep is checked against every arm it may draw up to this many."""


def check_drawable_baseline(spec: SweepSpec) -> None:
    """A tpe/random sweep's ``baseline:`` must be an arm its sampler can draw: one it never draws (a value
    not among an axis's, out of a range or off its step grid) was refused only by the comparison, after
    every trial had trained. ``resolve_baseline`` has checked the keys."""
    raw = spec.baseline
    if isinstance(raw, dict):
        for axis in spec.axes:
            if (why := _undrawable(axis, raw[axis.key])) is not None:
                raise spec.err(f"baseline.{axis.key}", f"{raw[axis.key]!r} {why}: sampler {spec.sampler} never "
                                                       "draws it, so no trial would be the baseline")
    elif isinstance(raw, str) and (labels := _drawable_labels(spec)) is not None and raw not in labels:
        shown = ", ".join(labels[:8]) + (" ..." if len(labels) > 8 else "")
        raise spec.err("baseline", f"no arm sampler {spec.sampler} can draw is labelled {raw!r}; arms: {shown}")


def _undrawable(axis: Any, value: Any) -> str | None:
    """Why ``axis`` never takes ``value`` (None: it may)."""
    if not axis.is_range:
        wanted = canonical_value(encode(value))
        if all(canonical_value(encode(v)) != wanted for v in axis.values):
            return f"is not one of the axis's values ({', '.join(map(repr, axis.values))})"
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return f"is not a number, but the axis is the range [{axis.low}, {axis.high}]"
    dist = axis_distribution(axis)
    if isinstance(dist.step, int) and not isinstance(value, int):  # labelled 3.0, never as a drawn 3
        return "is not an integer, but the axis draws integers"
    if not axis.low <= value <= axis.high:
        return f"is outside the axis's range [{axis.low}, {axis.high}]"
    if dist.step and (Decimal(str(value)) - Decimal(str(dist.low))) % Decimal(str(dist.step)) != 0:
        return f"is not on the axis's grid (low {axis.low} plus a multiple of step {dist.step})"
    return None


def _drawable_labels(spec: SweepSpec) -> list[str] | None:
    """The labels of every arm the sampler may draw, or None when there are more than ``MAX_LABELLED_ARMS``
    (a continuous range is refused with a baseline by ``check_sampler``)."""
    per_axis = [_axis_points(axis) for axis in spec.axes]
    if any(p is None for p in per_axis) or math.prod(len(p) for p in per_axis) > MAX_LABELLED_ARMS:
        return None
    return [arm_label(spec.axes, dict(zip([a.key for a in spec.axes], combo, strict=True)))
            for combo in itertools.product(*per_axis)]


def _axis_points(axis: Any) -> list[Any] | None:
    """Every value ``axis`` may take (None: too many, or a continuous range)."""
    if not axis.is_range:
        return list(axis.values)
    dist = axis_distribution(axis)
    if dist.step is None or (n := round((dist.high - dist.low) / dist.step) + 1) > MAX_LABELLED_ARMS:
        return None
    return [dist.low + i * dist.step for i in range(n)]


def cli_baseline(spec: SweepSpec, text: str) -> SweepSpec:
    """``spec`` with ``compare --baseline TEXT`` as its baseline, read with the loader that reads a spec's
    ``baseline:`` (``{optim.lr: 1e-3}`` is the float 0.001, which YAML 1.1's safe_load kept a string) and
    checked as it is; errors name ``--baseline``. A tpe/random sweep's arms are its sampled points, known
    from its trials only: :func:`unsampled_cli_baseline` refuses one none of them is, at the table."""
    from klear_lab.config.yaml_io import parse_yaml

    try:
        value = parse_yaml(text)
    except yaml.YAMLError as exc:
        if text.lstrip().startswith("{"):  # meant as a mapping: a key given twice, a missing brace
            raise ConfigError(f"--baseline {text}: malformed YAML mapping: {getattr(exc, 'problem', exc)}") from None
        value = text
    new = dataclasses.replace(spec, baseline=value if isinstance(value, (dict, str)) else text,
                              baseline_from="--baseline")
    labels = [a.label for a in grid_arms(new)] if new.sampler == "grid" else []
    try:
        resolve_baseline(new, labels)
    except ConfigError as exc:
        where = str(exc).removeprefix(f"{spec.path}: baseline").removeprefix(".").removeprefix(":")
        hint = label_hint(new.baseline, labels) if isinstance(new.baseline, str) else ""
        raise ConfigError(f"--baseline {text}: {where.strip()}{hint}") from None
    return new


def unsampled_cli_baseline(spec: SweepSpec, label: str | None, sampled: list[str]) -> ConfigError:
    """The error for a ``--baseline`` that names no arm a tpe/random sweep sampled (``sampled``: their
    labels): its table would have had no deltas. A spec's own ``baseline:`` may name an arm not drawn yet
    (it is written before the sweep runs), and gets a note under the table instead."""
    raw = spec.baseline
    text = raw if isinstance(raw, str) else "{" + ", ".join(f"{k}: {v}" for k, v in dict(raw or {}).items()) + "}"
    return ConfigError(f"--baseline {text}: no arm the sweep sampled is labelled {label!r}; sampled arms "
                       f"({len(sampled)}): {shown_labels(sampled)}{label_hint(str(label), sampled)}")


def check_label_hint(spec: SweepSpec) -> None:
    """Refuse a label ``baseline:`` that is no arm's label but names one's numbers written another way
    (``lr=1e-3`` for ``lr=0.001``), or some of one's axes, with a did-you-mean; other labels are left to
    ``resolve_baseline``, which lists the arms. Arms: a grid's, or every arm a tpe/random sampler may draw."""
    raw = spec.baseline
    if not isinstance(raw, str):
        return
    labels = [a.label for a in grid_arms(spec)] if spec.sampler == "grid" else _drawable_labels(spec)
    if labels and raw not in labels and (hint := label_hint(raw, labels)):
        raise spec.err("baseline", f"no arm is labelled {raw!r}; arms: {shown_labels(labels)}{hint}")


def shown_labels(labels: list[str], limit: int = 12) -> str:
    """The first ``limit`` labels, and how many more."""
    more = f" and {len(labels) - limit} more" if len(labels) > limit else ""
    return ", ".join(labels[:limit]) + more


def label_hint(raw: str, labels: Iterable[str]) -> str:
    """`` (did you mean 'lr=0.001'? ...)`` for a label that names an arm's numbers written another way
    (``1e-3``, ``0.0010``, ``2.0`` for ``2``), else for one that names only some of an arm's axes
    (``lr=0.001`` of ``lr=0.001,weight_decay=0.2``); "" when neither."""
    labels = [label for label in labels if label != raw]
    twins = [label for label in labels if _same_numbers(raw, label)]
    if twins:
        return f" (did you mean {' or '.join(map(repr, twins[:3]))}? the same numbers, as the arm's label writes them)"
    parts = raw.split(",")
    wider = [label for label in labels if len(label.split(",")) > len(parts)
             and all(any(_same_numbers(p, q) for q in label.split(",")) for p in parts)]
    if wider:
        return (f" (did you mean {' or '.join(map(repr, wider[:3]))}{' or ...' if len(wider) > 3 else ''}? "
                "a label names every axis)")
    return ""


_NUMBER = re.compile(r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)")


def _same_numbers(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` read alike with every number compared as a number (``lr=1e-3``, ``lr=0.001``)."""
    ta, tb = _NUMBER.split(a), _NUMBER.split(b)
    if len(ta) != len(tb):
        return False
    return all(x == y if i % 2 == 0 else float(x) == float(y) for i, (x, y) in enumerate(zip(ta, tb)))
