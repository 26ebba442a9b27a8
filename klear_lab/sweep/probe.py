"""Which trials the pre-flight checks compose: each grid arm, or for ``tpe``/``random`` each axis value (its
range's ends) with the other axes at their first. Shared by the spec, override, path and data checks."""

from __future__ import annotations

from typing import Any

from klear_lab.sweep.grid import Arm
from klear_lab.sweep.spec import SweepSpec

MAX_COMPOSED_ARMS = 512  # grid arms past this are not composed by the checks


def probe_values(axis: Any) -> list[Any]:
    """An axis's values to check: its list, or a range's two ends."""
    if not axis.is_range:
        return list(axis.values)
    integer = isinstance(axis.step, int) or (isinstance(axis.low, int) and isinstance(axis.high, int))
    return [int(axis.low), int(axis.high)] if integer else [float(axis.low), float(axis.high)]


def trial_points(spec: SweepSpec, arms: list[Arm]) -> list[tuple[str, dict[str, Any]]]:
    """(label, axis values) of each grid arm; ``tpe``/``random`` (no ``arms``): of each axis value, the others at
    their first."""
    if arms:
        return [(arm.label, arm.params) for arm in arms[:MAX_COMPOSED_ARMS]]
    first = {a.key: probe_values(a)[0] for a in spec.axes}
    return [(f"{a.key}={v!r}", {**first, a.key: v}) for a in spec.axes for v in probe_values(a)]
