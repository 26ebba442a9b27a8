"""Checks of a sweep's baseline: a tpe/random sweep's ``baseline:`` must be an arm its sampler can draw
(checked before any trial); ``compare --baseline`` is read as ``baseline:`` is (:func:`cli_baseline`); a label
whose numbers are an arm's written another way (``lr=1e-3`` for ``lr=0.001``) gets a did-you-mean
(:func:`label_hint`); the table's baseline arm (:func:`table_baseline`), and where it came from
(:func:`baseline_source`)."""

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
    arm_point,
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
    if (bad := undrawable_baseline(spec)) is None:
        return
    key, value, why = bad
    raw, labels = spec.baseline, _drawable_labels(spec) or []
    if spec.baseline_from and key:
        raise ConfigError(f"--baseline {text or _shown(raw)}: {key}: {flow_yaml(value)} cannot be drawn: it {why}")
    if spec.baseline_from:
        raise ConfigError(f"--baseline {text or raw}: cannot be drawn: sampler {spec.sampler} draws no arm labelled "
                          f"{raw!r} (arms it draws: {shown_labels(labels)}){label_hint(str(raw), labels)}")
    if isinstance(raw, dict):
        raise spec.err(f"baseline.{key}", f"{value!r} {why}: sampler {spec.sampler} never draws it, so no trial "
                                          "would be the baseline")
    detail = f" ({short_names(spec.axes)[key]}: {value!r} {why})" if key else ""
    if sampled is not None:
        raise spec.err("baseline", f"no arm is labelled {raw!r}; sampled arms: {shown_labels(sampled)}{detail}")
    arms = f"; arms: {shown_labels(labels, 8)}" if labels else ""
    raise spec.err("baseline", f"no arm sampler {spec.sampler} can draw is labelled {raw!r}{arms}{detail}")


def _shown(raw: Any) -> str:
    """A baseline as the user writes it: a label, or a mapping in YAML (not Python's ``{'a': False}``)."""
    return raw if isinstance(raw, str) else flow_yaml(raw)


def undrawable_baseline(spec: SweepSpec) -> tuple[str, Any, str] | None:
    """Why a tpe/random sampler never draws ``spec.baseline``: (axis key, value, why) for a mapping's value or
    a label's (read back as numbers, :func:`label_values`: ``lr=0.00012345`` is on a fine step grid though the
    arms' labels keep 4 digits); ("", label, why) for a label that does not read back and names none of the
    arms the sampler may draw; None: it may be drawn, or there are too many arms to tell."""
    raw = spec.baseline
    labels = _drawable_labels(spec) if isinstance(raw, str) else None
    if labels is not None and raw in labels:  # an arm's own label (a rounded one: not read back)
        return None
    values = raw if isinstance(raw, dict) else label_values(spec, raw) if isinstance(raw, str) else None
    if values is None:
        return None if labels is None else ("", raw, "names no arm it may draw")
    for axis in spec.axes:
        if (why := _undrawable(axis, values[axis.key])) is not None:
            return axis.key, values[axis.key], why
    return None


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


def unsampled_cli_baseline(spec: SweepSpec, label: str | None, sampled: list[str]) -> ConfigError:
    """The error for a ``--baseline`` that names no arm a tpe/random sweep sampled (``sampled``: their
    labels): its table would have had no deltas. A spec's own ``baseline:`` may name an arm not drawn yet
    (it is written before the sweep runs), and gets a note under the table instead."""
    raw = spec.baseline
    text = _shown(raw)
    return ConfigError(f"--baseline {text}: no arm the sweep sampled is labelled {label!r}; sampled arms "
                       f"({len(sampled)}): {shown_labels(sampled)}{label_hint(str(label), sampled)}")


def table_baseline(spec: SweepSpec, labels: list[str], records: Iterable[Any] = ()) -> str | None:
    """The baseline arm's label (:func:`resolve_baseline`), also when a tpe/random sampler never drew it.

    tpe/random: a label of ``labels``, else the arm of the sampled point (``records``' ``point``) the baseline
    names as numbers (:func:`sampled_arm`), but for a label that writes an arm's numbers another way
    (``lr=2e-3``), refused with a did-you-mean. One the sampler may draw and did not
    leaves the table with no deltas and a note (``compare_text.missing_baseline_note``) rather than refusing
    the sweep's trials; one no draw can take is an error (:func:`check_drawable_baseline`), as is one from
    ``compare --baseline`` (``spec.baseline_from``), given to compare the arms there are, naming none of
    ``labels`` (when there are any).

    Raises:
        ConfigError: ``baseline:`` is malformed, names no possible arm, or (``--baseline``) no arm of ``labels``.
    """
    if spec.sampler == "grid" or spec.baseline is None:
        return resolve_baseline(spec, labels)
    label = resolve_baseline(spec, [])  # a malformed baseline (an unknown axis key, ...) still raises
    if isinstance(spec.baseline, str) and label in labels:  # as the table writes it
        return label
    hint = label_hint(label, labels) if isinstance(spec.baseline, str) else ""  # lr=2e-3: a did-you-mean, no match
    if not hint and (arm := sampled_arm(spec, records)) is not None:  # a mapping, or a label finer than 4 digits
        return arm
    if label in labels:  # a mapping, in trials that recorded no point
        return label
    check_drawable_baseline(spec, sampled=labels)
    if spec.baseline_from and labels:  # --baseline, given to compare the arms sampled: refused, listing them
        raise unsampled_cli_baseline(spec, label, labels)
    if hint:
        raise spec.err("baseline", f"no arm the sweep sampled is labelled {label!r}; sampled arms: "
                                   f"{shown_labels(labels)}{hint}")
    return label


def sampled_arm(spec: SweepSpec, records: Iterable[Any]) -> str | None:
    """The arm (its label in the table) of the first of ``records`` whose point ``spec.baseline`` names, numbers
    compared as numbers: a label finer than the arms' 4 digits (``lr=0.00012345``, drawn as
    0.00012344999999999999 and labelled ``lr=0.0001234``) or a mapping. None: no record has that point."""
    raw = spec.baseline
    values = raw if isinstance(raw, dict) else label_values(spec, raw) if isinstance(raw, str) else None
    for r in records if values is not None else ():
        point = arm_point(getattr(r, "point", None), spec.axes)
        if point is not None and all(_same_value(values[a.key], point[a.key]) for a in spec.axes):
            return r.arm
    return None


def _same_value(a: Any, b: Any) -> bool:
    """Equal as config values; numbers within float noise (a step grid's 0.00012 + 345 * 1e-8)."""
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b)):
        return math.isclose(a, b, rel_tol=1e-12)
    return canonical_value(encode(a)) == canonical_value(encode(b))


def baseline_source(spec: SweepSpec, baseline: str | None) -> str:
    """The line under the printed table saying where its baseline came from, as :func:`table_baseline` picked
    it: ``baseline: lr=0.001 (`baseline:` of sweeps/x.yaml)``, or the first arm (of the grid; of the sampled
    ones by label). "" without a baseline, or where a table note says it (``compare_text.baseline_note``:
    ``--baseline``, a sweep directory's frozen spec, a spec edited since the sweep ran)."""
    from klear_lab.console import shown_path
    from klear_lab.sweep.compare_text import baseline_note

    if baseline is None or baseline_note(spec, baseline):
        return ""
    if spec.baseline is not None:
        how = f"`baseline:` of {shown_path(spec.path)}"
    else:
        first = "the grid's first arm" if spec.sampler == "grid" else "the sampled arm whose label sorts first"
        how = f"{first}: the spec has no `baseline:`"
    return f"baseline: {baseline} ({how})"


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
