"""Compose an experiment config in one fixed order and validate it before any work.

Order (later wins): schema defaults -> the ``base:`` chain -> the experiment file -> CLI
dotlist overrides -> sweep trial parameters. A layer that sets a component to a different
``name`` (or writes ``rl.clip=gppo``) drops the previous component's parameters, so stale
knobs never leak into a new variant. Every leaf remembers which layer set it, so errors name
the file (or ``command line``) the bad key came from.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from klear_lab.config.checks import check, warn_unused_model_shape
from klear_lab.config.schema import ExperimentConfig
from klear_lab.config.validate import expand_and_validate
from klear_lab.errors import ConfigError
from klear_lab.plugins import load_entry_point_plugins, load_plugins

Layer = tuple[str, dict[str, Any]]


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads ``2e-3`` as a float (YAML 1.1 would read it as a string) and refuses a key
    given twice in one mapping (YAML keeps the last, silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`, merged by the base class
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is given twice in one mapping",
                                                        key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


class _Dumper(yaml.SafeDumper):
    """SafeDumper that quotes what :class:`_Loader` would read as a float (the string ``"1e-3"``): a saved
    config with such a string (a tag, a name) composed back to a float and could not be resumed."""


for _cls in (_Loader, _Dumper):
    _cls.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$""", re.X),
        list("-+0123456789."),
    )


def dump_yaml(data: Any) -> str:
    """YAML text that :func:`load_yaml` reads back to ``data`` (keys in their order)."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False)


def load_yaml(path: Path) -> dict[str, Any]:
    """Read one YAML mapping; errors name the file (and line for syntax errors)."""
    if path.is_dir():  # `klear-lab config experiments/quickstart`: "not found" would send them looking for it
        yamls = ", ".join(sorted(p.name for p in path.glob("*.yaml"))[:5])
        raise ConfigError(f"{path}: is a directory; expected an experiment YAML file"
                          + (f" (in it: {yamls})" if yamls else ""))
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        data = yaml.load(path.read_text(), Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}{where}: malformed YAML: {getattr(exc, 'problem', exc)}") from None
    if data is None:
        raise ConfigError(f"{path}: the file is empty (an experiment names at least its `base:`)")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


def file_layers(path: Path, _seen: tuple[Path, ...] = ()) -> list[Layer]:
    """The ``base:`` chain of ``path`` (base first), each as (file label, body)."""
    path = path.resolve()
    if path in _seen:
        chain = " -> ".join(str(p) for p in (*_seen, path))
        raise ConfigError(f"{path}: circular base chain: {chain}")
    return body_layers(load_yaml(path), _label(path), path.parent, (*_seen, path))


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
        if not base_path.suffix:
            base_path = base_path.with_suffix(".yaml")
        if not base_path.is_file():
            raise ConfigError(f"{label}: base {base!r} not found (looked for {base_path})")
        layers += file_layers(base_path, seen)
    _absolutize_plugins(body, base_dir)
    return [*layers, (label, body)]


class Cleared(dict):
    """A mapping set after ``KEY=null`` in one layer (``eval.samples_per_source=null
    eval.samples_per_source.lcb_v5=4``): it replaces what earlier layers set, where a mapping merges."""


def override_key(item: str) -> str:
    """The dotted key of a ``key=value`` override (a Hydra-style ``+``/``~`` prefix dropped)."""
    return item.split("=", 1)[0].strip().lstrip("+~")


def dotlist_layer(overrides: list[str], label: str = "command line", base_dir: Path | None = None) -> Layer:
    """Hydra-style ``key=value`` overrides (values parsed as YAML), merged in order by the layer merge
    (``rl.clip=cispo rl.clip.eps_high=5`` is one node; ``KEY=null`` then ``KEY.x=...`` is ``{x: ...}``
    alone); relative ``.py`` plugins and ``model.init_from`` are made absolute against ``base_dir``: the
    working directory for a command line, the file's directory for overrides a file lists (a sweep spec)."""
    body: dict[str, Any] = {}
    nulled: list[list[str]] = []  # the paths set to null, in order
    for item in overrides:
        if "=" not in item or item.startswith("="):
            raise ConfigError(f"{label}: override {item!r} must look like key=value")
        try:  # parsed one at a time, so an error names the bad one
            one = OmegaConf.to_container(OmegaConf.from_dotlist([item]))
        except (OmegaConfBaseException, yaml.YAMLError) as exc:
            hint = " (values are YAML: inside {...} write `key: value`, with a space)" if "{" in item else ""
            raise ConfigError(f"{label}: cannot parse override {item!r}{hint}: {' '.join(str(exc).split())}") from None
        _merge(body, one, label, "", {})  # type: ignore[arg-type]
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


def merge_layers(layers: list[Layer]) -> tuple[dict[str, Any], dict[str, str]]:
    """Merge layers over schema defaults; return (config, provenance of each leaf path)."""
    config = _plain(dataclasses.asdict(ExperimentConfig()))
    provenance: dict[str, str] = {}
    for label, body in layers:
        _merge(config, body, label, "", provenance)
    return config, provenance


def compose(experiment: str | Path | Mapping[str, Any] | None, overrides: list[str] | None = None,
            extra_layers: list[Layer] | None = None) -> dict[str, Any]:
    """Compose, load plugins, validate and expand: the fully resolved config as a plain dict.

    ``experiment``: a YAML file, or a mapping (``{"base": "experiments/quickstart/sft.yaml", "sft":
    {"max_steps": 10}}``, a dict or OmegaConf config); ``overrides`` (``key=value``) come after it and
    ``extra_layers`` (a sweep trial's parameters) last.
    """
    if isinstance(experiment, Mapping) or OmegaConf.is_config(experiment):
        layers = mapping_layers(experiment)
    else:
        layers = file_layers(Path(experiment)) if experiment else []
    if overrides:
        layers.append(dotlist_layer(overrides))
    layers += extra_layers or []
    config, provenance = merge_layers(layers)
    load_entry_point_plugins()
    plugins = config.get("plugins") or []
    if not isinstance(plugins, list):  # a string was read as its characters: plugin 'm' of 'my/p.py'
        raise ConfigError(f"{provenance.get('plugins', 'config')}: plugins: must be a list, got {plugins!r}; "
                          f"write plugins=[{plugins}] on a command line, or a YAML list")
    load_plugins(plugins, [provenance.get(f"plugins.{i}", provenance.get("plugins", "config"))
                           for i in range(len(plugins))])
    config = _resolve_interpolations(config)
    expand_and_validate(config, provenance)
    try:
        check(config)
    except ConfigError as exc:
        raise _located(exc, provenance) from None
    warn_unused_model_shape(config, provenance, default_section("model"), starting_model(config))
    if isinstance(experiment, (str, Path)) and experiment and not config["run"].get("experiment"):
        config["run"]["experiment"] = _label(Path(experiment).resolve())
    return config


_STARTING: list[str] = []  # the init_from experiments being composed, outermost first


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
    start = str(Path(m["init_from"]).resolve())
    if start in _STARTING:
        chain = " -> ".join([*_STARTING[_STARTING.index(start):], start])
        raise _CircularStart(f"model.init_from: a circular chain of starting experiments: {chain}")
    _STARTING.append(start)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return compose(m["init_from"])["model"]
    except _CircularStart:
        raise
    except Exception:  # noqa: BLE001 - a missing file, a bad key, a plugin that fails to import: said by the run
        return None
    finally:
        _STARTING.pop()


@functools.cache
def default_section(name: str) -> dict[str, Any]:
    """A config section as the schema's defaults alone compose it (components expanded)."""
    config, provenance = merge_layers([])
    expand_and_validate(config, provenance)
    return config[name]


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
    span = f"a list of {len(old)} item{'s' * (len(old) != 1)}: {path}.0 to {path}.{len(old) - 1}" if old \
        else f"an empty list: set it whole, {path}=[...]"
    for key in value:
        if str(key) not in items:
            what = "index out of range" if str(key).isdigit() and str(int(key)) == str(key) else "not an index"
            raise ConfigError(f"{label}: {path}.{key}: {what} ({path} is {span})")
    _merge(items, {str(k): v for k, v in value.items()}, label, f"{path}.", provenance)
    return list(items.values())


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


def _resolve_interpolations(config: dict[str, Any]) -> dict[str, Any]:
    try:
        return OmegaConf.to_container(OmegaConf.create(config), resolve=True)  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        raise ConfigError(f"cannot resolve interpolation: {exc}") from None


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


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _label(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
