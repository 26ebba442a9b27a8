"""Merge config layers over the schema's defaults, remembering which layer set each leaf.

The rules a researcher relies on: a layer that names another component (``rl.clip=cispo``) drops the
previous one's parameters; ``data.sources.0.n_prompts=5`` merges into one item of a list; every layer's
``plugins`` load; a mapping set after ``KEY=null`` replaces what earlier layers set.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from klear_lab.config.schema import ExperimentConfig
from klear_lab.errors import ConfigError

Layer = tuple[str, dict[str, Any]]
"""(label, body): the file, ``command line`` or sweep trial that set ``body``, for error messages."""


class Cleared(dict):
    """A mapping set after ``KEY=null`` in one layer (``eval.samples_per_source=null
    eval.samples_per_source.lcb_v5=4``): it replaces what earlier layers set, where a mapping merges."""


def merge_layers(layers: list[Layer]) -> tuple[dict[str, Any], dict[str, str]]:
    """Merge layers over schema defaults; return (config, provenance of each leaf path)."""
    config = _plain(dataclasses.asdict(ExperimentConfig()))
    provenance: dict[str, str] = {}
    for label, body in layers:
        merge_body(config, body, label, provenance)
    return config, provenance


def merge_body(dst: dict[str, Any], body: dict[str, Any], label: str, provenance: dict[str, str]) -> None:
    """Merge one layer's ``body`` into ``dst`` in place by the rules above; leaves it sets take ``label``."""
    _merge(dst, body, label, "", provenance)


def component_paths(schema: type = ExperimentConfig, prefix: str = "", many: bool = False) -> set[str]:
    """Dotted paths of the single-component nodes in the schema (``rl.clip``, ``data.mix``...), or with
    ``many`` of the component lists (``data.sources``...)."""
    out: set[str] = set()
    for f in dataclasses.fields(schema):
        if "axis" in f.metadata and bool(f.metadata.get("many")) == many:
            out.add(prefix + f.name)
        elif dataclasses.is_dataclass(f.default_factory) if callable(f.default_factory) else False:
            out |= component_paths(f.default_factory, f"{prefix}{f.name}.", many)  # type: ignore[arg-type]
    return out


def _merge(dst: dict, src: dict, label: str, prefix: str, provenance: dict[str, str]) -> None:
    for key, value in src.items():
        key = str(key)
        path = f"{prefix}{key}"
        old = dst.get(key)
        if path in _COMPONENT_PATHS:
            if isinstance(value, str):
                value = {"name": value}  # component shorthand: rl.clip=gppo
            if isinstance(old, str):  # a shorthand earlier on the same command line
                old = dst[key] = {"name": old}
            if _renamed(old, value):
                old = dst[key] = {}  # switching component: drop the previous one's params
            # (a command line's rl.clip.eps_high=5 rl.clip=cispo has no name before: both stay)
        elif prefix[:-1] in _COMPONENT_LISTS and _renamed(old, value):
            old = dst[key] = {}  # an item of a component list (data.sources.0.name=arith): the same rule
        if path == "plugins" and isinstance(old, list) and (value is None or isinstance(value, list)):
            dst[key] = _joined_plugins(old, value, label, provenance)  # every layer's plugins load
        elif path == "plugins" and key in dst and old is None and isinstance(value, list):
            dst[key] = [None, *value]  # one command line's plugins=null plugins=[...]: clear, then these
        elif isinstance(value, Cleared):
            dst[key] = dict(value)  # KEY=null before it in its layer: replaces, as the null would have
            provenance[path] = label
            _mark_children(dst[key], path, label, provenance)
        elif isinstance(old, list) and isinstance(value, dict):
            dst[key] = _merge_into_list(old, value, label, path, provenance)  # data.sources.0.n=5
        elif isinstance(old, dict) and isinstance(value, dict):
            _merge(old, value, label, f"{path}.", provenance)
        else:
            dst[key] = value
            if isinstance(old, (dict, list)):  # what the replaced one held is not where its keys come from now
                for stale in [k for k in provenance if k.startswith(f"{path}.")]:
                    del provenance[stale]
            provenance[path] = label
            _mark_children(value, path, label, provenance)


_COMPONENT_PATHS = component_paths()
_COMPONENT_LISTS = component_paths(many=True)


def _renamed(old: Any, value: Any) -> bool:
    """``value`` names another component than ``old`` does: the previous one's params do not carry over."""
    return isinstance(old, dict) and isinstance(value, dict) and "name" in old \
        and value.get("name", old["name"]) != old["name"]


def _merge_into_list(old: list, value: dict, label: str, path: str, provenance: dict[str, str]) -> list:
    """A mapping of indices merged into a copy of a list (``data.sources.0.n_prompts=5``); only the
    leaves it sets take ``label`` as their provenance."""
    items = {str(i): copy.deepcopy(v) for i, v in enumerate(old)}  # the layer that set the list stays as written
    indices = f"{path}.0" if len(old) == 1 else f"{path}.0 to {path}.{len(old) - 1}"
    span = f"a list of {len(old)} item{'s' * (len(old) != 1)}: {indices}" if old \
        else f"an empty list: set it whole, {path}=[...]"
    if value and not any(str(k).lstrip("-").isdigit() for k in value):  # `sources: {name: arith}`: an item alone
        keys = ", ".join(map(str, value))
        item = f", or one item's key, {path}.0.{next(iter(value))}" if old and isinstance(old[0], dict) else ""
        raise ConfigError(f"{label}: {path}: a mapping ({keys}) where a list is expected ({path} is {span}); "
                          f"give the whole list, `{path}: [...]` in a file or {path}=[...] on a command line{item}")
    for key in value:
        if str(key) not in items:
            what = "index out of range" if _is_index(key) else "not an index"
            raise ConfigError(f"{label}: {path}.{key}: {what} ({path} is {span})")
    _merge(items, {str(k): v for k, v in value.items()}, label, f"{path}.", provenance)
    return list(items.values())


def _is_index(key: Any) -> bool:
    return str(key).isdigit() and str(int(key)) == str(key)


def _joined_plugins(old: list, new: list, label: str, provenance: dict[str, str]) -> list:
    """``plugins`` of a later layer join the earlier ones (a plugin only adds components; ``plugins: null``
    clears the list); each entry keeps the label of the layer that listed it first."""
    if new is None or (new and new[0] is None):  # cleared (then, maybe, listed again)
        old, new = [], (new or [])[1:]
    joined = list(old)
    labels = [provenance.get(f"plugins.{i}", provenance.get("plugins", label)) for i in range(len(old))]
    for plugin in new:
        if plugin not in joined:
            joined.append(plugin)
            labels.append(label)
    for i, where in enumerate(labels):
        provenance[f"plugins.{i}"] = where
    provenance["plugins"] = label
    return joined


def _mark_children(value: Any, path: str, label: str, provenance: dict[str, str]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            provenance[f"{path}.{k}"] = label
            _mark_children(v, f"{path}.{k}", label, provenance)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            provenance[f"{path}.{i}"] = label
            _mark_children(v, f"{path}.{i}", label, provenance)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
