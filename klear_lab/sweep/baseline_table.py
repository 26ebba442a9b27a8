"""The comparison table's baseline arm (:func:`table_baseline`): a grid's by label; a tpe/random sweep's, whose arms
are the points its trials sampled, by the values it names (:func:`sampled_arm`); and the line under the table
saying where it came from (:func:`baseline_source`)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from klear_lab.errors import ConfigError
from klear_lab.sweep.axes import Axis
from klear_lab.sweep.baseline_checks import baseline_values, check_drawable_baseline, label_hint, shown_labels
from klear_lab.sweep.grid import arm_label, arm_point, canonical_value, encode, flow_yaml, resolve_baseline
from klear_lab.sweep.spec import SweepSpec


def table_baseline(spec: SweepSpec, labels: list[str], records: Iterable[Any] = ()) -> str | None:
    """The baseline arm's label in the table (``labels``: its arms; ``records``: its trials).

    A grid's, or the default one (no ``baseline:``), is :func:`resolve_baseline`'s. A tpe/random sweep's, the
    first rule that applies:

    1. a label that is one of ``labels``: that arm;
    2. a label that writes an arm's numbers another way (``lr=2e-3``): refused below, with a did-you-mean;
    3. the arm of the sampled point whose values the baseline names (:func:`sampled_arm`);
    4. a mapping's label, where that arm's trials recorded no point (a study from before points were kept);
    5. none: a value no draw can take is refused (:func:`check_drawable_baseline`), as is a ``--baseline``
       (``spec.baseline_from``, listing the sampled arms); a spec's ``baseline:``, written before the sweep ran,
       is returned as a label no sampled arm has, and the table notes it was never sampled.

    Raises:
        ConfigError: ``baseline:`` is malformed, names no possible arm, or (``--baseline``) no arm of ``labels``.
    """
    if spec.sampler == "grid" or spec.baseline is None:
        return resolve_baseline(spec, labels)
    label = resolve_baseline(spec, [])  # a malformed baseline (an unknown axis key, ...) still raises
    is_label = isinstance(spec.baseline, str)
    if is_label and label in labels:
        return label
    hint = label_hint(label, labels) if is_label else ""
    found = None if hint else (sampled_arm(spec, records) or _unpointed_arm(spec, label, labels, records))
    if found is not None:
        return found
    check_drawable_baseline(spec, sampled=labels)
    label = _unsampled_label(spec, label, labels)
    if spec.baseline_from and labels:
        raise unsampled_cli_baseline(spec, label, labels)
    if hint:
        raise spec.err("baseline", f"no arm the sweep sampled is labelled {label!r}; sampled arms: "
                                   f"{shown_labels(labels)}{hint}")
    return label


def sampled_arm(spec: SweepSpec, records: Iterable[Any]) -> str | None:
    """The arm (its label in the table) of the first of ``records`` whose point ``spec.baseline`` names, numbers
    compared as numbers (:func:`_same_value`): a label finer than the arms' 4 digits (``lr=0.00012345``, drawn
    as 0.00012344999999999999 and labelled ``lr=0.0001234``), a mapping, or ``alpha=0`` (drawn as 5.55e-17).
    None: no record has that point."""
    values = baseline_values(spec)
    for r in records if values is not None else ():
        point = arm_point(getattr(r, "point", None), spec.axes)
        if point is not None and all(_same_value(a, values[a.key], point[a.key]) for a in spec.axes):
            return r.arm
    return None


def _same_value(axis: Axis, a: Any, b: Any) -> bool:
    """Equal as values of ``axis``: numbers within float noise, a range's within a millionth of its step (of
    its span without one; relative only on a log scale): Optuna draws -0.3 + 3 * 0.1, the 0 of a step grid
    crossing zero, as 5.55e-17, which no relative tolerance calls 0."""
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b)):
        span = (axis.step or (0 if axis.log else axis.high - axis.low)) if axis.is_range else 0
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-6 * span)
    return canonical_value(encode(a)) == canonical_value(encode(b))


def _unpointed_arm(spec: SweepSpec, label: str, labels: list[str], records: Iterable[Any]) -> str | None:
    """``label`` where it is an arm of ``labels`` whose trials recorded no point, so a label is all there is
    to match; where they did, :func:`sampled_arm` compared their values (0.00012341 is labelled
    ``lr=0.0001234``, as a mapping's 0.00012345 is)."""
    pointed = {r.arm for r in records if arm_point(getattr(r, "point", None), spec.axes) is not None}
    return label if label in labels and label not in pointed else None


def _unsampled_label(spec: SweepSpec, label: str, labels: list[str]) -> str:
    """The label of a baseline no sampled arm is: a mapping's written with digits enough that it is not a
    sampled arm's (0.00012345: ``lr=0.00012345``, not the ``lr=0.0001234`` of a sampled 0.00012341)."""
    if not isinstance(spec.baseline, dict):
        return label  # a label: one of ``labels`` was found by rule 1
    digits = 4
    while label in labels and digits < 17:  # 17 digits tell any two floats apart
        digits += 1
        label = arm_label(spec.axes, spec.baseline, digits)
    return label


def unsampled_cli_baseline(spec: SweepSpec, label: str | None, sampled: list[str]) -> ConfigError:
    """The error for a ``--baseline`` that names no arm a tpe/random sweep sampled (``sampled``: their
    labels): its table would have had no deltas. A spec's own ``baseline:`` may name an arm not drawn yet
    (it is written before the sweep runs), and gets a note under the table instead."""
    raw = spec.baseline
    text = raw if isinstance(raw, str) else flow_yaml(raw)
    return ConfigError(f"--baseline {text}: no arm the sweep sampled is labelled {label!r}; sampled arms "
                       f"({len(sampled)}): {shown_labels(sampled)}{label_hint(str(label), sampled)}")


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
