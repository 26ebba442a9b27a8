"""Checks of a sweep's baseline: a tpe/random sweep's ``baseline:`` must be an arm its sampler can draw
(checked before any trial); ``compare --baseline`` is read as ``baseline:`` is (:func:`cli_baseline`); a label
whose numbers are an arm's written another way (``lr=1e-3`` for ``lr=0.001``) gets a did-you-mean
(:func:`label_hint`). The table's baseline arm is ``baseline_table``'s."""

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
from klear_lab.sweep.grid import (
    arm_label,
    axis_distribution,
    canonical_value,
    encode,
    flow_yaml,
    grid_arms,
    resolve_baseline,
    short_names,
)
from klear_lab.sweep.spec import SweepSpec

MAX_LABELLED_ARMS = 10_000
"""A label baseline of a tpe/random sweep is checked against every arm it may draw up to this many."""


def check_drawable_baseline(spec: SweepSpec, text: str | None = None, sampled: list[str] | None = None) -> None:
    """A tpe/random sweep's ``baseline:`` must be an arm its sampler can draw: one it never draws (a value
    not among an axis's, out of a range or off its step grid) was refused only by the comparison, after
    every trial had trained. ``resolve_baseline`` has checked the keys. One from ``compare --baseline TEXT``
    (``spec.baseline_from``) "cannot be drawn", said naming ``--baseline``; at the table (``sampled``: the
    arms sampled), a label is "no arm" of those."""
    raw = spec.baseline
    labels = _drawable_labels(spec) if isinstance(raw, str) else None
    if (bad := undrawable_baseline(spec, labels)) is None:
        return
    key, shown, why = bad
    if spec.baseline_from and key:
        raise ConfigError(f"--baseline {text or _shown(raw)}: {key}: {shown} cannot be drawn: it {why}")
    if spec.baseline_from:
        raise ConfigError(f"--baseline {text or raw}: cannot be drawn: sampler {spec.sampler} draws no arm labelled "
                          f"{raw!r} (arms it draws: {shown_labels(labels or [])}){label_hint(str(raw), labels or [])}")
    if isinstance(raw, dict):
        raise spec.err(f"baseline.{key}", f"{shown} {why}: sampler {spec.sampler} never draws it, so no trial "
                                          "would be the baseline")
    detail = f" ({short_names(spec.axes)[key]}: {shown} {why})" if key else ""
    if sampled is not None:
        raise spec.err("baseline", f"no arm is labelled {raw!r}; sampled arms: {shown_labels(sampled)}{detail}")
    arms = f"; arms: {shown_labels(labels, 8)}" if labels else ""
    raise spec.err("baseline", f"no arm sampler {spec.sampler} can draw is labelled {raw!r}{arms}{detail}")


def _shown(raw: Any) -> str:
    """A baseline as the user writes it: a label, or a mapping in YAML (not Python's ``{'a': False}``)."""
    return raw if isinstance(raw, str) else flow_yaml(raw)


def undrawable_baseline(spec: SweepSpec, labels: list[str] | None) -> tuple[str, str, str] | None:
    """Why a tpe/random sampler never draws ``spec.baseline``: (axis key, its value as the user wrote it, why)
    for a mapping's value or a label's (read back as numbers, :func:`label_values`: ``lr=0.00012345`` is on a
    fine step grid though the arms' labels keep 4 digits); ("", label, why) for a label that does not read
    back and names none of ``labels`` (:func:`_drawable_labels`, for a label); None: it may be drawn, or
    there are too many arms to tell."""
    raw = spec.baseline
    if labels is not None and raw in labels:  # an arm's own label (a rounded one: not read back)
        return None
    if (values := baseline_values(spec)) is None:
        return None if labels is None else ("", raw, "names no arm it may draw")
    for axis in spec.axes:
        if (why := _undrawable(axis, values[axis.key], isinstance(raw, str))) is not None:
            return axis.key, _as_written(spec, axis.key), why
    return None


def _as_written(spec: SweepSpec, key: str) -> str:
    """The baseline's value of axis ``key`` as the user wrote it: a label's own text (``false``, not YAML's
    ``'false'`` for the string it reads as), a mapping's value in YAML."""
    raw = spec.baseline
    if isinstance(raw, dict):
        return flow_yaml(raw[key])
    return dict(zip([a.key for a in spec.axes], [p.partition("=")[2] for p in raw.split(",")], strict=True))[key]


def baseline_values(spec: SweepSpec) -> dict[str, Any] | None:
    """``spec.baseline``'s axis values: a mapping's own, a label's read back (:func:`label_values`); None for
    a label that does not read back (or no baseline)."""
    raw = spec.baseline
    if isinstance(raw, dict):
        return raw
    return label_values(spec, raw) if isinstance(raw, str) else None


def label_values(spec: SweepSpec, label: str) -> dict[str, Any] | None:
    """The axis values an arm label names, its numbers read as numbers (``lr=0.00012345`` -> 0.00012345); a
    categorical axis's text names the value whose label reads alike, else stands for itself (a number read
    as one). None when it is not one ``name=value`` per axis in order (a value label holding a comma)."""
    parts, short = label.split(","), short_names(spec.axes)
    if len(parts) != len(spec.axes):
        return None
    values = {}
    for axis, part in zip(spec.axes, parts, strict=True):
        name, eq, text = part.partition("=")
        if not eq or name != short[axis.key]:
            return None
        named = [] if axis.is_range else [v for v, lab in zip(axis.values, axis.labels, strict=True)
                                          if lab == text or _same_numbers(lab, text)]
        values[axis.key] = named[0] if named else _scalar(text)
    return values


def _scalar(text: str) -> Any:
    """``3`` -> 3, ``1e-3`` -> 0.001, other text as it is."""
    if re.fullmatch(r"[-+]?\d+", text):
        return int(text)
    return float(text) if _NUMBER.fullmatch(text) else text


def _undrawable(axis: Any, value: Any, by_label: bool) -> str | None:
    """Why ``axis`` never takes ``value`` (None: it may); ``by_label``: named in a label, so a categorical
    axis's labels are listed, as a label writes them."""
    if not axis.is_range:
        wanted = canonical_value(encode(value))
        if all(canonical_value(encode(v)) != wanted for v in axis.values):
            return _not_a_value(axis, by_label)
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


def _not_a_value(axis: Any, by_label: bool) -> str:
    """``is not one of the axis's values (false, true)`` in YAML for a mapping; for a label, the labels it
    may name (``False, True``; an axis's own ``labels:``, called labels)."""
    if not by_label:
        return f"is not one of the axis's values ({', '.join(flow_yaml(v) for v in axis.values)})"
    named = any(label != str(v) for v, label in zip(axis.values, axis.labels, strict=True))
    return f"is not one of the axis's {'labels' if named else 'values'} ({', '.join(axis.labels)})"


def _drawable_labels(spec: SweepSpec) -> list[str] | None:
    """The labels of every arm the sampler may draw, or None when there are more than ``MAX_LABELLED_ARMS``
    (a continuous range is refused with a baseline by ``check_sampler``)."""
    per_axis = [_axis_points(axis) for axis in spec.axes]
    if any(p is None for p in per_axis) or math.prod(len(p) for p in per_axis) > MAX_LABELLED_ARMS:
        return None
    return list(dict.fromkeys(arm_label(spec.axes, dict(zip([a.key for a in spec.axes], combo, strict=True)))
                              for combo in itertools.product(*per_axis)))  # a fine step's 4-digit labels repeat


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
    if new.sampler != "grid":  # a value no draw can take: not "not sampled", as if more trials might draw it
        check_drawable_baseline(new, text)
    return new


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
