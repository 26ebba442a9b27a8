"""Compose an experiment config in one fixed order and validate it before any work.

Order (later wins): schema defaults -> the ``base:`` chain -> the experiment file -> CLI
dotlist overrides -> sweep trial parameters. A layer that sets a component to a different
``name`` (or writes ``rl.clip=gppo``) drops the previous component's parameters, so stale
knobs never leak into a new variant. Every leaf remembers which layer set it, so errors name
the file (or ``command line``) the bad key came from.

``layers.py`` reads the layers (YAML through ``yaml_io.py``), ``merge.py`` merges them; this module
loads plugins, validates and checks the result.
"""

from __future__ import annotations

import contextvars
import functools
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from klear_lab.config.checks import check, warn_unused_model_shape
from klear_lab.config.layers import Layer, dotlist_layer, file_label, file_layers, mapping_layers
from klear_lab.config.merge import merge_layers
from klear_lab.config.unread import refuse_unread
from klear_lab.config.validate import expand_and_validate
from klear_lab.errors import ConfigError, keyed_error
from klear_lab.plugin_copies import with_kept_copies
from klear_lab.plugins import load_entry_point_plugins, load_plugins


def compose(experiment: str | Path | Mapping[str, Any] | None, overrides: list[str] | None = None,
            extra_layers: list[Layer] | None = None) -> dict[str, Any]:
    """Compose, load plugins, validate and expand: the fully resolved config as a plain dict.

    ``experiment``: a YAML file, or a mapping (``{"base": "experiments/quickstart/sft.yaml", "sft":
    {"max_steps": 10}}``, a dict or OmegaConf config); ``overrides`` (``key=value``) come after it and
    ``extra_layers`` (a sweep trial's parameters) last.
    """
    if isinstance(experiment, Mapping) or OmegaConf.is_config(experiment):
        layers = mapping_layers(experiment)
        typed = {layers[-1][0]}  # the mapping's own keys; its base: files are files
    else:
        layers, typed = file_layers(Path(experiment)) if experiment else [], set()
    files = len(layers)
    if overrides:
        layers.append(dotlist_layer(overrides))
    layers += extra_layers or []
    typed |= {label for label, _ in layers[files:]}
    config, provenance = merge_layers(layers)
    load_entry_point_plugins()
    plugins = config.get("plugins") or []
    if not isinstance(plugins, list):  # a string was read as its characters: plugin 'm' of 'my/p.py'
        raise ConfigError(f"{provenance.get('plugins', 'config')}: plugins: must be a list, got {plugins!r}; "
                          f"write plugins=[{plugins}] on a command line, or a YAML list")
    origins = [provenance.get(f"plugins.{i}", provenance.get("plugins", "config")) for i in range(len(plugins))]
    if (kept := with_kept_copies(plugins, origins)) != plugins:  # a run's saved config, its plugin file gone
        config["plugins"] = plugins = kept
    load_plugins(plugins, origins)
    config = _resolve_interpolations(config, provenance)
    expand_and_validate(config, provenance)
    try:
        check(config)
    except ConfigError as exc:
        raise _located(exc, provenance) from None
    defaults = _defaults()
    refuse_unread(config, provenance, typed, defaults)
    warn_unused_model_shape(config, provenance, defaults["model"], starting_model(config))
    if (source := experiment_file(experiment)) and not config["run"].get("experiment"):
        config["run"]["experiment"] = file_label(source.resolve())
    return config


def experiment_file(experiment: Any) -> Path | None:
    """The file ``run.experiment`` records: the experiment file, or a mapping's (last) ``base:`` file."""
    if isinstance(experiment, (str, Path)):
        return Path(experiment) if experiment else None
    if not (isinstance(experiment, Mapping) or OmegaConf.is_config(experiment)):
        return None
    bases = experiment.get("base")
    base = bases if isinstance(bases, str) else (list(bases)[-1] if bases else None)
    if not isinstance(base, str):
        return None
    path = Path(base)
    return path if path.suffix else path.with_suffix(".yaml")


# the init_from experiments being composed, outermost first: per thread (threads composing the same
# experiment at once, a notebook's pool, read as a circular chain)
_STARTING: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("klear_lab_starting", default=())


class _CircularStart(ConfigError):
    """A ``model.init_from`` chain that comes back to an experiment in it (training it would never end)."""


def starting_model(config: dict[str, Any]) -> dict[str, Any] | None:
    """The model section of the experiment an RL run starts from (``model.init_from``), composed quietly
    (its own warnings are its runs'); None when there is none or it cannot be composed here (the run itself
    says why when it trains it).

    Raises:
        ConfigError: the chain of ``init_from`` experiments comes back to one in it.
    """
    m = config["model"]
    if not m["init_from"] or m["name_or_path"]:
        return None
    start, starting = str(Path(m["init_from"]).resolve()), _STARTING.get()
    if start in starting:
        chain = " -> ".join([*starting[starting.index(start):], start])
        raise _CircularStart(f"model.init_from: a circular chain of starting experiments: {chain}")
    token = _STARTING.set((*starting, start))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return compose(m["init_from"])["model"]
    except _CircularStart:
        raise
    except Exception:  # noqa: BLE001 - a missing file, a bad key, a plugin that fails to import: said by the run
        return None
    finally:
        _STARTING.reset(token)


@functools.cache
def _defaults() -> dict[str, Any]:
    """The config the schema's defaults alone compose (components expanded); cached: read it, do not change it."""
    config, provenance = merge_layers([])
    expand_and_validate(config, provenance)
    return config


def _resolve_interpolations(config: dict[str, Any], provenance: dict[str, str]) -> dict[str, Any]:
    """``${key}`` interpolations resolved; one that cannot be names the key holding it, what it holds and the
    file (or command line) that set it: OmegaConf's message named neither file nor value."""
    try:
        return OmegaConf.to_container(OmegaConf.create(config), resolve=True)  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        key = str(getattr(exc, "full_key", "") or "")
        reason = str(getattr(exc, "msg", "") or exc).strip().partition("\n")[0]
        if not key:
            raise ConfigError(f"cannot resolve an interpolation: {reason}") from None
        held = _value_at(config, key.split("."))
        error = keyed_error(key, f"{key}: {held!r}: cannot resolve the interpolation: {reason}")
        raise _located(error, provenance) from None


def _value_at(node: Any, path: list[str]) -> Any:
    """The value at ``path`` in nested dicts and lists (list indices as digits), or None."""
    for part in path:
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _located(exc: ConfigError, provenance: dict[str, str]) -> ConfigError:
    """``exc`` naming the file (or command line) that set each of its keys (``a/b``: both), or a mapping
    above one, where known: "(run.kind from exp.yaml)"."""
    sources = []
    for key in filter(None, str(getattr(exc, "key", "")).split("/")):
        parts = key.split(".")
        where = next((provenance[k] for k in (".".join(parts[:n]) for n in range(len(parts), 0, -1))
                      if k in provenance), None)
        if where:
            sources.append(f"{key} from {where}")
    return ConfigError(f"{exc} ({'; '.join(sources)})") if sources else exc
