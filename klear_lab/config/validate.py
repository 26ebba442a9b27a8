"""Check a merged config against the schema and the registries; fill in component defaults.

Errors name the key path, the layer (file or command line) that set it, what was expected and
what was given, with a did-you-mean for misspelt keys and the registered names for unknown
components. Components are instantiated once here, so value checks in their ``__post_init__``
(an epsilon out of range, say) fail before any model or data is touched.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import types
import typing
from typing import Any, Union

from klear_lab.config.schema import ExperimentConfig
from klear_lab.errors import ConfigError, defined_at, did_you_mean
from klear_lab.registry import REGISTRIES


def expand_and_validate(config: dict[str, Any], provenance: dict[str, str]) -> None:
    """Validate ``config`` in place against ``ExperimentConfig``; expand component defaults."""
    _check_section(config, ExperimentConfig, "", provenance)


def _where(path: str, provenance: dict[str, str]) -> str:
    probe = path
    while probe:
        if probe in provenance:
            return provenance[probe]
        probe = probe.rpartition(".")[0]
    return "schema defaults"


def _unknown(path: str, key: str, allowed: list[str], provenance: dict[str, str], what: str = "key") -> ConfigError:
    full = f"{path}{key}"
    elsewhere = _in_other_sections(key, path) if what == "key" else []
    did = f" (did you mean {elsewhere[0]!r}?)" if elsewhere else did_you_mean(key, allowed, prefix=path)
    said = f"unknown key {full!r}" if what == "key" else f"{full!r} is not a {what}"
    return ConfigError(f"{_where(full, provenance)}: {said}{did}; "
                       f"allowed under {path.rstrip('.') or 'top level'}: {', '.join(sorted(allowed))}")


_ONE_KIND_SECTIONS = ("rl", "sft")  # read by one kind of run: `sft.steps` is not meant as `rl.steps`


def _in_other_sections(key: str, path: str) -> list[str]:
    """``SECTION.key`` for each top-level section other than ``path`` that has ``key``, where every kind of run
    reads it: ``rl.grad_clip`` is ``optim.grad_clip`` (a closer spelling in the same section, ``rl.clip``, would
    mislead). Not ``rl``/``sft`` (another kind's setting, refused next) nor ``name`` (``run.name`` is no
    model's or section's name)."""
    if key == "name":
        return []
    hints = typing.get_type_hints(ExperimentConfig)
    return [f"{f.name}.{key}" for f in dataclasses.fields(ExperimentConfig)
            if dataclasses.is_dataclass(hints[f.name]) and f"{f.name}." != path and f.name not in _ONE_KIND_SECTIONS
            and key in {g.name for g in dataclasses.fields(hints[f.name])}]


def _check_section(node: Any, schema: type, path: str, provenance: dict[str, str]) -> None:
    if not isinstance(node, dict):
        raise ConfigError(f"{_where(path.rstrip('.'), provenance)}: {path.rstrip('.')} must be a mapping, "
                          f"got {type(node).__name__}")
    fields = {f.name: f for f in dataclasses.fields(schema)}
    hints = typing.get_type_hints(schema)
    for key in node:
        if key not in fields:
            raise _unknown(path, str(key), list(fields), provenance)
    for name, f in fields.items():
        key_path = f"{path}{name}"
        tp = hints[name]
        if "axis" in f.metadata:
            if f.metadata.get("many"):
                if not isinstance(node[name], list):
                    raise _type_error(key_path, "list of components", node[name], provenance)
                for i, item in enumerate(node[name]):
                    node[name][i] = _check_component(item, f.metadata["axis"], f"{key_path}.{i}", provenance)
            else:
                node[name] = _check_component(node[name], f.metadata["axis"], key_path, provenance)
        elif dataclasses.is_dataclass(tp):
            _check_section(node[name], tp, f"{key_path}.", provenance)
        else:
            node[name] = _check_value(node[name], tp, key_path, provenance)


def _check_component(node: Any, axis: str, path: str, provenance: dict[str, str]) -> dict[str, Any]:
    registry = REGISTRIES[axis]
    if isinstance(node, str):
        node = {"name": node}
    if not isinstance(node, dict) or not isinstance(node.get("name"), str):
        where = provenance.get(f"{path}.name") or _where_node(path, provenance)  # a bad name: where it was set
        raise ConfigError(f"{where}: {path} must be a {axis} component "
                          f"{{name: ..., params...}}; registered: {', '.join(registry.names())}")
    try:
        registry.get(node["name"])
    except ConfigError as exc:
        raise ConfigError(f"{_where(path + '.name', provenance)}: {path}.name: {exc}") from None
    types_ = registry.field_types(node["name"])
    for key in node:
        if key != "name" and key not in types_:
            raise _unknown(f"{path}.", str(key), ["name", *types_], provenance,
                           what=f"parameter of {axis} {node['name']!r}")
    expanded = {"name": node["name"]}
    for key, default in registry.params(node["name"]).items():
        value = node.get(key, default)
        try:
            expanded[key] = _check_value(value, types_[key], f"{path}.{key}", provenance)
        except ConfigError as exc:
            raise _explained(exc, registry.get(node["name"]), key, value) from None
    try:
        registry.build(_as_args(expanded, types_))
    except ConfigError as exc:
        own = f" (with its own defaults, {defined_at(registry.get(node['name']))})" if set(node) == {"name"} else ""
        raise ConfigError(f"{_where_node(path, provenance)}: {path}: {exc}{own}") from None
    return expanded


def _explained(exc: ConfigError, component: type, key: str, value: Any) -> ConfigError:
    """``exc`` with what the component says a wrongly typed ``value`` of its parameter ``key`` usually means,
    where it defines ``explain_type_error(key, value) -> str | None`` (a classmethod): a null ``path`` is an
    empty ``path=``, a text ``fields`` a mapping written without its space. The types stay what they are."""
    declared = inspect.getattr_static(component, "explain_type_error", None)
    explain = component.explain_type_error if isinstance(declared, (classmethod, staticmethod)) else None
    hint = explain(key, value) if explain else None  # an ordinary method would need an instance: not asked
    return ConfigError(f"{exc}; {hint}") if hint else exc


def _where_node(path: str, provenance: dict[str, str]) -> str:
    """Every place that set ``path`` or one of its parameters (a component's values may come from several)."""
    labels = dict.fromkeys(v for k, v in provenance.items() if k == path or k.startswith(path + "."))
    return " + ".join(labels) or _where(path, provenance)


def _as_args(node: dict[str, Any], types_: dict[str, Any]) -> dict[str, Any]:
    """The node's values as the dataclass's fields declare them (:func:`_to_type`)."""
    return {k: _to_type(v, types_[k]) if k in types_ else v for k, v in node.items()}


def _to_type(value: Any, tp: Any) -> Any:
    """``value`` (checked against ``tp`` already) in ``tp``'s containers: lists become tuples where a tuple is
    declared (frozen dataclasses stay hashable), ints floats where a float is, at any depth and in the matching
    arm of a union. ``tuple[int, ...] | None`` got a list and ``dict[str, float]`` ints, unlike their defaults."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        arm = next((a for a in args if _matches(value, a)[0]), None)
        return value if arm is None else _to_type(value, arm)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, (list, tuple, dict)):
        return value
    if (origin is tuple or tp is tuple) and not isinstance(value, dict):
        fixed = args and args[-1] is not Ellipsis  # tuple[int, str]: one type per position
        return tuple(_to_type(v, args[i] if fixed else (args[0] if args else Any)) for i, v in enumerate(value))
    if (origin is list or tp is list) and not isinstance(value, dict):
        return [_to_type(v, args[0] if args else Any) for v in value]
    if (origin is dict or tp is dict) and isinstance(value, dict):
        value_tp = args[1] if len(args) == 2 else Any
        return {k: _to_type(v, value_tp) for k, v in value.items()}
    return value


def component_args(node: dict[str, Any], axis: str) -> dict[str, Any]:
    """Arguments for ``REGISTRIES[axis].build`` from a validated node."""
    return _as_args(node, REGISTRIES[axis].field_types(node["name"]))


def _origin(tp: Any) -> Any:
    return typing.get_origin(tp) or tp


def _type_error(path: str, expected: str, value: Any, provenance: dict[str, str], tp: Any = None) -> ConfigError:
    given = "null" if value is None else f"{type(value).__name__} ({value!r})"
    return ConfigError(f"{_where(path, provenance)}: {path}: expected {expected}, got {given}"
                       + _quote_hint(path, value, tp))


def _quote_hint(path: str, value: Any, tp: Any) -> str:
    """Text given as a YAML number or bool (``run.name=123``, ``name: yes``) is read as one, and its spelling is
    gone (``0123`` reads as 83, ``12:30`` as 750): say how to keep it text rather than guess the text back."""
    if not (_takes_text(tp) and isinstance(value, (int, float))):
        return ""
    kind = "boolean" if isinstance(value, bool) else "number"
    return (f"; YAML reads it as a {kind}: to mean the text, quote it ({path}=\"'...'\" on a "
            f"command line, {path.rpartition('.')[2]}: \"...\" in a file)")


def _check_value(value: Any, tp: Any, path: str, provenance: dict[str, str]) -> Any:
    """Return ``value`` (ints widened to float where a float is wanted) or raise a type error."""
    ok, coerced = _matches(value, tp)
    if not ok:
        if (found := _non_finite(value)) is not None:  # YAML .inf / .nan: a diverged run, not a value
            inner, bad = found
            raise ConfigError(f"{_where(path, provenance)}: {path}{inner}: expected a finite number, got {bad!r}")
        raise _type_error(path, _type_name(tp), value, provenance, tp)
    return coerced


def default_problem(value: Any, tp: Any) -> str | None:
    """Why a component's own default ``value`` does not fit its declared type ``tp`` (None when it does)."""
    ok, _ = _matches(value, tp)
    return None if ok or _non_finite(value) is not None else f"{value!r} is not {_type_name(tp)}"


def _takes_text(tp: Any) -> bool:
    """Whether ``tp`` is ``str`` or a union with it (``str | None``)."""
    return tp is str or (typing.get_origin(tp) in (Union, types.UnionType) and str in typing.get_args(tp))


def _non_finite(value: Any, inner: str = "") -> tuple[str, float] | None:
    """(``.key`` / ``.0`` path inside ``value``, the number) of its first inf or nan, else None."""
    if isinstance(value, float) and not math.isfinite(value):
        return inner, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for key, item in items:
        if (found := _non_finite(item, f"{inner}.{key}")) is not None:
            return found
    return None


def _matches(value: Any, tp: Any) -> tuple[bool, Any]:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return True, value
    if origin is typing.Literal:  # bools are not 0/1 here either
        return any(value == a and type(value) is type(a) for a in args), value
    if origin in (Union, types.UnionType):
        for arm in args:
            ok, coerced = _matches(value, arm)
            if ok:
                return True, coerced
        return False, value
    if tp is type(None):
        return value is None, value
    if tp is float:
        return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)), (
            float(value) if isinstance(value, (int, float)) else value)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if tp in (str, bool):
        return isinstance(value, tp), value
    if origin is tuple and args and args[-1] is not Ellipsis:  # tuple[int, str]: one type per position
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            return False, value
        matched = [_matches(item, arm) for item, arm in zip(value, args, strict=True)]
        return all(ok for ok, _ in matched), [coerced for _, coerced in matched]
    if origin in (list, tuple) or tp in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return False, value
        inner = args[0] if args else Any
        out = []
        for item in value:
            ok, coerced = _matches(item, inner)
            if not ok:
                return False, value
            out.append(coerced)
        return True, out
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            return False, value
        key_tp, value_tp = args if len(args) == 2 else (Any, Any)
        # checked, not widened: a mapping's ints stay ints, as saved configs (and their hashes) hold them
        return all(_matches(k, key_tp)[0] and _matches(v, value_tp)[0] for k, v in value.items()), value
    return isinstance(value, tp) if isinstance(tp, type) else True, value


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return "one of " + ", ".join(map(repr, args))
    if origin is tuple and args and args[-1] is not Ellipsis:
        return f"a list of {len(args)}: [{', '.join(_type_name(a) for a in args)}]"
    if origin in (list, tuple) and args and args[0] is not Any:  # YAML writes both as lists
        return f"a list of {_type_name(args[0])}"
    if origin is dict and len(args) == 2:
        return f"a mapping of {_type_name(args[0])} to {_type_name(args[1])}"
    return getattr(tp, "__name__", str(tp))
