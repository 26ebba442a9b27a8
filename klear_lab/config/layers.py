"""The layers an experiment is composed from: its ``base:`` chain of YAML files (or a Python mapping) and
``key=value`` overrides, each labelled with where it came from and with the paths it names made absolute."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from klear_lab.config.merge import Cleared, Layer, merge_body
from klear_lab.config.yaml_io import load_yaml
from klear_lab.console import shown_path
from klear_lab.errors import ConfigError

__all__ = ["Layer", "body_layers", "dotlist_layer", "file_label", "file_layers", "mapping_layers", "override_key"]


def file_layers(path: Path, _seen: tuple[Path, ...] = ()) -> list[Layer]:
    """The ``base:`` chain of ``path`` (base first), each as (file label, body)."""
    given, path = path, path.resolve()
    if path in _seen:
        chain = " -> ".join(str(p) for p in (*_seen, path))
        raise ConfigError(f"{path}: circular base chain: {chain}")
    body = load_yaml(path)
    _refuse_other_specs(given, body)
    return body_layers(body, file_label(path), path.parent, (*_seen, path))


# an experiment's top-level keys: a file with none of them and a sweep's or an analysis's keys is such a spec
_SECTIONS = {"base", "run", "model", "data", "sft", "rl", "trainer", "optim", "eval", "tracking", "plugins"}


def sweep_spec_like(body: dict[str, Any]) -> bool:
    """Whether a YAML file's top level reads as a sweep spec's (``axes:`` or ``objective:``, and no section
    an experiment has)."""
    keys = set(map(str, body))
    return bool(keys & {"axes", "objective"}) and not keys & _SECTIONS


def _refuse_other_specs(path: Path, body: dict[str, Any]) -> None:
    """A sweep spec, an analysis spec or a run's ``run.json`` given where an experiment is read (``klear-lab
    train``, ``config``, ``config --diff``, a ``base:``) was refused as "unknown key 'description'": say what
    the file is and the command it is for."""
    keys = sorted(set(map(str, body)))
    listed = ", ".join(keys[:4])
    if {"status", "config_hash", "run_id"} <= set(keys):  # run.json (its `data` is a section's name too)
        raise ConfigError(f"{path}: a run's record (keys {listed}), not an experiment: give the run's saved config, "
                          f"{path.parent / 'config.yaml'}")
    if set(keys) & _SECTIONS:
        return
    if sweep_spec_like(body):
        named = body.get("experiment")
        experiment = (f"; its experiment is {shown_path(os.path.normpath((path.parent / named).absolute()))}"
                      if isinstance(named, str) else "")
        raise ConfigError(f"{path}: a sweep spec (keys {listed}), not an experiment: run it with "
                          f"`klear-lab sweep {path}`{experiment}")
    if set(keys) & {"claims", "benchmarks", "paper"}:
        raise ConfigError(f"{path}: an analysis spec (keys {listed}), not an experiment: `klear-lab reproduce "
                          f"{path}` shows it next to the results of the sweeps it names")


def mapping_layers(mapping: Any) -> list[Layer]:
    """An experiment given as a Python mapping (a dict or an OmegaConf config, as a notebook builds one):
    its ``base:`` chain, plugins and ``model.init_from`` read from the working directory."""
    body = OmegaConf.to_container(mapping) if OmegaConf.is_config(mapping) else copy.deepcopy(dict(mapping))
    if not isinstance(body, dict):
        raise ConfigError(f"experiment: a mapping of config sections, got {type(mapping).__name__}")
    return body_layers(body, "python mapping", Path.cwd(), ())


def body_layers(body: dict[str, Any], label: str, base_dir: Path, seen: tuple[Path, ...]) -> list[Layer]:
    """``body`` after the layers of its ``base:`` files (read from ``base_dir``), paths made absolute."""
    bases = body.pop("base", None) or []
    if not (isinstance(bases, str) or isinstance(bases, list) and all(isinstance(b, str) for b in bases)):
        raise ConfigError(f"{label}: base: expected a file name or a list of them, got {bases!r}")
    layers: list[Layer] = []
    for base in [bases] if isinstance(bases, str) else bases:
        base_path = (base_dir / base) if not Path(base).is_absolute() else Path(base)
        if base_path.is_dir():
            raise ConfigError(f"{label}: base {base!r} is a directory ({base_path}); name an experiment .yaml file")
        if not base_path.suffix:
            base_path = base_path.with_suffix(".yaml")
        if not base_path.is_file():
            raise ConfigError(f"{label}: base {base!r} not found (looked for {base_path})")
        layers += file_layers(base_path, seen)
    _absolutize_plugins(body, base_dir)
    return [*layers, (label, body)]


def override_key(item: str) -> str:
    """The dotted key of a ``key=value`` override (a Hydra-style ``+``/``~`` prefix dropped)."""
    return item.split("=", 1)[0].strip().lstrip("+~")


def check_override_form(item: str, label: str = "command line") -> None:
    """Raise ``ConfigError`` unless ``item`` is ``key=value`` (a key before the first ``=``)."""
    key = override_key(item)
    if "=" not in item or not key:
        raise ConfigError(f"{label}: override {item!r} must look like key=value")
    if "" in key.split("."):  # `.optim.lr=3` read as a key '' at the top level
        raise ConfigError(f"{label}: override {item!r}: the key {key!r} has an empty part (a dot at its start or "
                          "end, or two together); keys look like optim.lr")


def dotlist_layer(overrides: list[str], label: str = "command line", base_dir: Path | None = None) -> Layer:
    """Hydra-style ``key=value`` overrides (values parsed as YAML), merged in order by the layer merge
    (``rl.clip=cispo rl.clip.eps_high=5`` is one node; ``KEY=null`` then ``KEY.x=...`` is ``{x: ...}``
    alone); relative ``.py`` plugins and ``model.init_from`` are made absolute against ``base_dir``: the
    working directory for a command line, the file's directory for overrides a file lists (a sweep spec)."""
    body: dict[str, Any] = {}
    nulled: list[list[str]] = []  # the paths set to null, in order
    for item in overrides:
        check_override_form(item, label)
        try:  # parsed one at a time, so an error names the bad one
            one = OmegaConf.to_container(OmegaConf.from_dotlist([item]))
        except (OmegaConfBaseException, yaml.YAMLError) as exc:
            hint = " (values are YAML: inside {...} write `key: value`, with a space)" if "{" in item else ""
            raise ConfigError(f"{label}: cannot parse override {item!r}{hint}: {' '.join(str(exc).split())}") from None
        merge_body(body, one, label, {})  # type: ignore[arg-type]
        path = item.split("=", 1)[0].strip().split(".")
        if _at(one, path) is None:
            nulled.append(path)
    for path in nulled:
        parent, value = _at(body, path[:-1]), _at(body, path)
        if isinstance(parent, dict) and isinstance(value, dict):  # set again after the null
            parent[path[-1]] = Cleared(value)
    _absolutize_plugins(body, base_dir or Path.cwd())  # typed paths are the shell's: the saved config works anywhere
    return label, body


def _at(node: Any, path: list[str]) -> Any:
    """The value at ``path`` below ``node``, or None."""
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node


def _absolutize_plugins(body: dict[str, Any], base_dir: Path) -> None:
    """Paths a file names (``.py`` plugins, ``model.init_from``) are relative to that file."""
    model = body.get("model")
    init = model.get("init_from") if isinstance(model, dict) else None
    if isinstance(init, str) and not Path(init).is_absolute():
        model["init_from"] = str((base_dir / init).resolve())
    plugins = body.get("plugins")
    if isinstance(plugins, list):
        body["plugins"] = [_absolute_plugin(p, base_dir) for p in plugins]
    elif isinstance(plugins, dict):  # plugins.0=my.py
        body["plugins"] = {k: _absolute_plugin(p, base_dir) for k, p in plugins.items()}


def _absolute_plugin(plugin: Any, base_dir: Path) -> Any:
    if isinstance(plugin, str) and plugin.endswith(".py") and not Path(plugin).is_absolute():
        return str((base_dir / plugin).resolve())
    return plugin


def file_label(path: Path) -> str:
    """``path`` relative to the working directory where it lies below it (as a researcher typed it)."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
