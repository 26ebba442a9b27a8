"""A sweep spec's axes: the :class:`Axis` of one swept config key and the parser of the spec's ``axes:``.

An axis is categorical (``values``, with display ``labels``) or a numeric range (``low``, ``high``, ``log``,
``step``: tpe/random only); see ``spec.py`` for the YAML form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from klear_lab.errors import ConfigError, did_you_mean

LIST_KEYS = ("values", "labels")
RANGE_KEYS = {"low", "high", "log", "step"}


@dataclass
class Axis:
    """One swept config key: categorical ``values`` (with display ``labels``) or a numeric range."""

    key: str
    values: list[Any] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None

    @property
    def is_range(self) -> bool:
        return self.low is not None

    @property
    def is_continuous(self) -> bool:
        """A float range without a step: no two trials draw the same value."""
        return self.is_range and self.step is None and not (isinstance(self.low, int) and isinstance(self.high, int))


def parse_axes(path: Path, raw: Any) -> list[Axis]:
    """The spec's ``axes:`` mapping (config key -> values or range) as Axis objects; errors name ``path``."""
    if raw is None or raw == {}:
        raise ConfigError(f"{path}: axes: empty grid; give at least one config key with a list of values")
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: axes: expected a mapping of config key -> values, got {raw!r}")
    return [_parse_axis(path, str(key), body) for key, body in raw.items()]


def _parse_axis(path: Path, key: str, body: Any) -> Axis:
    where = f"{path}: axes.{key}"
    if isinstance(body, list):
        body = {"values": body}
    if not isinstance(body, dict):
        raise ConfigError(f"{where}: expected a list of values, {{values, labels}} or {{low, high, log}}")
    if "values" in body:
        extra = set(body) - set(LIST_KEYS)
        if extra:
            raise _unknown_key(where, extra, LIST_KEYS)
        values, labels = body["values"], body.get("labels")
        if not isinstance(values, list):
            raise ConfigError(f"{where}.values: expected a list of values, got {values!r}")
        if not values:
            raise ConfigError(f"{where}: empty grid: the axis has no values")
        if len({repr(v) for v in values}) != len(values):
            raise ConfigError(f"{where}: duplicate values {values}")
        if labels is None:
            labels = [_value_label(v) for v in values]
        distinct = isinstance(labels, list) and len(set(map(str, labels))) == len(labels)
        if not distinct or len(labels) != len(values):
            raise ConfigError(f"{where}: labels must be {len(values)} distinct strings, one per value")
        return Axis(key, list(values), [str(x) for x in labels])
    ranged = bool(set(body) & RANGE_KEYS)
    extra = set(body) - RANGE_KEYS - (set() if ranged else set(LIST_KEYS))
    if extra:  # a misspelt range key (hihg), or, with no range key there, a list's misspelt values: (valuse)
        range_keys = ("low", "high", "log", "step")
        raise _unknown_key(where, extra, range_keys if ranged else LIST_KEYS + range_keys)
    if not {"low", "high"} <= set(body):
        raise ConfigError(f"{where}: a range needs low and high (and optional log, step); got {sorted(body)}")
    low, high = body["low"], body["high"]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high)) or low >= high:
        raise ConfigError(f"{where}: low and high must be numbers with low < high, got {low!r}, {high!r}")
    log, step = body.get("log", False), body.get("step")
    if not isinstance(log, bool):
        raise ConfigError(f"{where}.log: expected true or false, got {log!r}")
    if step is not None and (not isinstance(step, (int, float)) or isinstance(step, bool) or step <= 0):
        raise ConfigError(f"{where}.step: expected a number > 0, got {step!r}")
    if step is not None and (fit := _fitting_high(low, high, step)) != high:
        above = _number(_dec(fit) + _dec(step))
        give = f"high: {fit} (or {above})" if fit > low else f"high: {above} or a smaller step"
        raise ConfigError(f"{where}: step {step} does not divide the range [{low}, {high}]: the sampler would "
                          f"never draw above {fit}; give {give}")
    return Axis(key, low=low, high=high, log=log, step=step)


def _unknown_key(where: str, extra: set[Any], allowed: tuple[str, ...]) -> ConfigError:
    """The error for the first of an axis body's ``extra`` keys, with a did-you-mean from ``allowed``."""
    key = sorted(map(str, extra))[0]
    return ConfigError(f"{where}: unknown key {key!r}{did_you_mean(key, allowed)}; allowed: {', '.join(allowed)}")


def _fitting_high(low: float, high: float, step: float) -> float:
    """The largest value of the grid ``low + k * step`` that is <= ``high``: Optuna cut a range its step did
    not divide down to it with a UserWarning (and a baseline at ``high`` was never drawn). Decimal, as Optuna
    reads the numbers: 0.3 - 0.1 divides by 0.1."""
    return _number(_dec(low) + (_dec(high) - _dec(low)) // _dec(step) * _dec(step))


def _dec(value: float) -> Decimal:
    return Decimal(str(value))


def _number(value: Decimal) -> float:
    """``5`` for Decimal 5.0, ``0.9`` for 0.9: a number as a spec would write it."""
    return int(value) if value == value.to_integral_value() else float(value)


def _value_label(value: Any) -> str:
    if isinstance(value, dict) and "name" in value:
        return str(value["name"])
    return str(value)
