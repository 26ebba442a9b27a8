"""A tpe/random sweep's ``baseline:`` must be an arm its sampler can draw (checked before any trial)."""

from __future__ import annotations

import itertools
import math
from decimal import Decimal
from typing import Any

from klear_lab.sweep.grid import arm_label, axis_distribution, canonical_value, encode
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
