"""What the config keys and components mean, for ``klear-lab config --keys`` and ``klear-lab components``.

Descriptions come from docstrings: a dataclass field's attribute docstring (the string right under it, as in
``schema.py``) or an ``Args:`` / ``Attributes:`` / ``Parameters:`` entry of its class docstring (components).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import re
import textwrap
from typing import Any

from klear_lab.config.schema import ExperimentConfig
from klear_lab.errors import ConfigError, KlearError, did_you_mean

_SECTION = re.compile(r"^(Args|Arguments|Attributes|Parameters):\s*$")
_ENTRY = re.compile(r"^(\s+)(\w+)(?:\s*\([^)]*\))?:\s*(.*)$")


def split_doc(doc: str) -> tuple[str, dict[str, str]]:
    """``doc`` (cleaned, as ``inspect.getdoc`` gives it) without its ``Args:``-style sections, and their
    entries: name -> description on one line."""
    kept: list[str] = []
    entries: dict[str, str] = {}
    current, indent, inside = None, None, False
    for line in doc.splitlines():
        if _SECTION.match(line):
            current, indent, inside = None, None, True
            continue
        if inside and line.strip() and not line[0].isspace():  # the section's end: unindented text
            inside = False
        if not inside:
            kept.append(line)
            continue
        entry = _ENTRY.match(line)
        if entry and (indent is None or len(entry[1]) == indent):
            current, indent = entry[2], len(entry[1])
            entries[current] = entry[3]
        elif current and line.strip():
            entries[current] = f"{entries[current]} {line.strip()}".strip()
    return "\n".join(kept).strip(), entries


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> description of the dataclass ``cls`` (its bases' fields too), on one line each: the
    attribute docstring under the field, else the field's entry in an ``Args:``-style section."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        docs |= split_doc(inspect.getdoc(klass) or "")[1] if klass.__doc__ else {}
        docs |= _attribute_docstrings(klass)
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: " ".join(v.split()) for k, v in docs.items() if k in names and v.strip()}


def _attribute_docstrings(cls: type) -> dict[str, str]:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):  # no source (a class built in a REPL or by exec)
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    return {node.target.id: nxt.value.value for node, nxt in zip(body, body[1:], strict=False)
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)}


def component_keys(schema: type = ExperimentConfig, prefix: str = "") -> dict[str, str]:
    """Config key -> axis of every component node and component list in the schema, in its order
    (``data.sources``: source, ``data.filter``: difficulty_filter, ``rl.clip``: clip...)."""
    out: dict[str, str] = {}
    for f in dataclasses.fields(schema):
        if "axis" in f.metadata:
            out[prefix + f.name] = f.metadata["axis"]
        elif dataclasses.is_dataclass(f.default_factory):
            out |= component_keys(f.default_factory, f"{prefix}{f.name}.")  # type: ignore[arg-type]
    return out


def resolve_axes(word: str) -> list[str]:
    """The component axes ``word`` names: an axis (``difficulty_filter``), a config key holding one
    (``data.filter``), the last part of such a key where only one axis has it (``filter``, ``mix``), or a
    config section (``rl``: its components' axes).

    Raises:
        KlearError: naming the axes and their config keys, with a did-you-mean.
    """
    from klear_lab.registry import REGISTRIES

    if word in REGISTRIES:
        return [word]
    keys = component_keys()
    if word in keys:
        return [keys[word]]
    by_last: dict[str, dict[str, str]] = {}
    for key, axis in keys.items():
        by_last.setdefault(key.rpartition(".")[2], {})[key] = axis
    if word in by_last:
        found = by_last[word]
        if len(set(found.values())) == 1:
            return [next(iter(found.values()))]
        raise KlearError(f"{word!r} is ambiguous: " + ", ".join(f"{k} ({a})" for k, a in found.items())
                         + "; give the whole key or the axis")
    in_section = list(dict.fromkeys(a for k, a in keys.items() if k.startswith(word + ".")))
    if in_section:
        return in_section
    did = did_you_mean(word, [*REGISTRIES, *keys, *by_last])
    axes = ", ".join(f"{a} ({', '.join(k for k, x in keys.items() if x == a) or 'no config key'})" for a in REGISTRIES)
    raise KlearError(f"unknown axis {word!r}{did}; axes (and the config keys naming one): {axes}")


def _sections(schema: type = ExperimentConfig, prefix: str = "") -> list[tuple[str, type, dataclasses.Field]]:
    """(dotted key, the class that declares it, its field) for every key of the schema, in its order."""
    out = []
    for f in dataclasses.fields(schema):
        if "axis" not in f.metadata and dataclasses.is_dataclass(f.default_factory):
            out += _sections(f.default_factory, f"{prefix}{f.name}.")  # type: ignore[arg-type]
        else:
            out.append((prefix + f.name, schema, f))
    return out


def key_rows(config: dict[str, Any], prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, value in ``config``, description) of every key at or under ``prefix`` (all when empty); a
    component's parameters follow its node, described by its docstring where it documents them.

    Raises:
        ConfigError: no key is at or under ``prefix`` (with a did-you-mean).
    """
    from klear_lab.registry import REGISTRIES

    rows: list[tuple[str, str, str]] = []
    everything: list[str] = []
    for key, schema, f in _sections():
        value = _at(config, key)
        axis = f.metadata.get("axis")
        described = field_docs(schema).get(f.name, "")
        if axis:
            many = f.metadata.get("many")
            value = [item.get("name") for item in value] if many else value
            described = (f"{described} " if described else "") + (
                f"{'A list of' if many else 'The'} {axis} component{'s' * bool(many)} ({REGISTRIES[axis].doc}): "
                f"`klear-lab components {axis}` lists the choices and their parameters.")
        node = [(key, _text(value["name"] if axis and not f.metadata.get("many") else value), described)]
        if axis and f.metadata.get("many"):  # each list item, as overrides name it: data.sources.0.n_prompts
            for i, item in enumerate(_at(config, key)):
                node += _component_rows(f"{key}.{i}", axis, item, f"item {i} of {key}")
        elif axis:
            node += _component_rows(key, axis, value, "")[1:]
        everything += [k for k, _, _ in node]
        rows += [r for r in node if not prefix or r[0] == prefix or r[0].startswith(prefix + ".")]
    if not rows:
        sections = sorted({k.split(".")[0] for k in everything})
        did = did_you_mean(prefix, everything + sections)
        raise ConfigError(f"no config key at or under {prefix!r}{did}; sections: {', '.join(sections)}")
    return rows


def _component_rows(key: str, axis: str, node: dict[str, Any], what: str) -> list[tuple[str, str, str]]:
    """(key, value, description) of a component node (its name, described as ``what``) and each parameter,
    described by the component's docstring where it documents them."""
    from klear_lab.registry import REGISTRIES

    docs = field_docs(REGISTRIES[axis].get(node["name"]))
    return [(key, _text(node["name"]), f"{what}: a {axis} component" if what else ""),
            *((f"{key}.{param}", _text(v), docs.get(param, "")) for param, v in node.items() if param != "name")]


def _at(config: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        config = config[part]
    return config


def _text(value: Any) -> str:
    return value if isinstance(value, str) and value else json.dumps(value)  # "" shown as such
