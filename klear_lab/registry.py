"""Component registries: one per swappable axis, filled at import time.

An entry is a short permanent name bound to a frozen dataclass whose fields are the
component's hyperparameters (defaults = the source paper's values) and whose instances
are the component (usually callable). Config nodes name an entry and override fields:

    clip: {name: gppo, eps_high: 0.28}

Built-in entries live one per file in the axis' package and are discovered by walking the
package, so adding a file is the only edit. Out-of-tree entries arrive through the
``plugins:`` config list or the ``klear_lab.plugins`` entry-point group (see ``plugins.py``).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from klear_lab.errors import ConfigError, did_you_mean

T = TypeVar("T")


class Registry:
    """Name -> frozen-dataclass component class for one axis."""

    registrations = 0
    """Registrations made in this process, on any axis (the same entry again too): a plugin whose import made
    none is warned about (:mod:`klear_lab.plugins`)."""

    def __init__(self, axis: str, package: str | None, doc: str, calls: tuple[str, ...] = ()) -> None:
        """``calls``: the arguments an instance is called with, checked against ``__call__`` at registration."""
        self.axis, self.package, self.doc, self.calls = axis, package, doc, calls
        self._entries: dict[str, type] = {}
        self._loaded = False

    def register(self, name: str, params: type | None = None) -> Callable[[T], T]:
        """Decorator: ``@CLIP.register("gppo")`` on a frozen dataclass whose instances are the component, or
        ``@CLIP.register("my_clip", params=MyClipParams)`` on a function called as ``fn(params, *args)``,
        ``params`` a frozen dataclass of its hyperparameters (the function is returned unchanged, so a test
        can call it with a hand-made ``MyClipParams``)."""

        def deco(obj: T) -> T:
            cls = self._function_class(name, obj, params) if params is not None or inspect.isfunction(obj) else obj
            self._add(name, cls)
            return obj

        return deco

    def _function_class(self, name: str, fn: Any, params: type | None) -> type:
        """What the registry holds for a registered function: a frozen dataclass subclass of ``params`` whose
        instances call ``fn(instance, *args)`` (:func:`function_component`)."""
        if not self.calls:  # a source, model or rollout engine is asked for methods, not called
            raise TypeError(f"{self.axis} {name!r}: a {self.axis} is a frozen dataclass with methods (the built-ins "
                            f"in {self.package} are the examples), not a function")
        calls = f"(params, {', '.join(self.calls)})"
        if not inspect.isfunction(fn):
            raise TypeError(f"{self.axis} {name!r}: params= goes with a function `def {name}{calls}`, not "
                            f"{getattr(fn, '__qualname__', fn)!r}; a frozen dataclass registers alone")
        if params is None:
            raise TypeError(f"{self.axis} {name!r}: the function {fn.__qualname__} needs its hyperparameters: "
                            f"@{self.axis.upper()}.register({name!r}, params=<a frozen dataclass>), an empty "
                            "one for none")
        if not (isinstance(params, type) and dataclasses.is_dataclass(params)
                and params.__dataclass_params__.frozen):  # type: ignore[attr-defined]
            raise TypeError(f"{self.axis} {name!r}: params={getattr(params, '__qualname__', params)!r} must be "
                            "a frozen dataclass: @dataclass(frozen=True)")
        return function_component(fn, params)

    def _add(self, name: str, cls: Any) -> None:
        """Register the frozen dataclass ``cls`` under ``name``, once its contract is checked."""
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"{self.axis} {name!r}: {cls.__qualname__} must be a frozen dataclass: "
                            f"@dataclass(frozen=True) goes under @{self.axis.upper()}.register({name!r}) "
                            "(decorators apply bottom-up)")
        if not cls.__dataclass_params__.frozen:
            raise TypeError(f"{self.axis} {name!r}: {cls.__qualname__} must be frozen: @dataclass(frozen=True)")
        self._check_call(name, cls)
        self._check_defaults(name, cls)
        required = [f.name for f in dataclasses.fields(cls) if _default(f) is _REQUIRED]
        if required:
            raise TypeError(f"{self.axis} {name!r}: {cls.__qualname__}.{required[0]} has no default; every "
                            "hyperparameter needs one (the source paper's value), so a config can name the "
                            "component alone")
        old = self._entries.get(name)
        reimported = old is not None and old.__module__ != cls.__module__ and _source(old) == _source(cls)
        if old is not None and old is not cls and not reimported:  # an edited plugin file, imported
            # again, replaces its entries; nothing else may take a registered name
            raise KeyError(f"{self.axis} {name!r} is already registered by {_registered_by(old)}")
        self._entries[name] = cls
        Registry.registrations += 1
        if "registered_name" not in cls.__dict__:
            cls.registered_name = name  # type: ignore[attr-defined]

    def _check_defaults(self, name: str, cls: type) -> None:
        """A default its own type refuses (``k: int = "seven"``) fails here, naming the class: at compose it
        was blamed on "schema defaults", with no word of the plugin."""
        from klear_lab.config.validate import default_problem

        try:
            hints = typing.get_type_hints(cls)
        except Exception:  # noqa: BLE001 - an annotation that does not resolve: compose says which
            return
        for f in dataclasses.fields(cls):
            default = _default(f)
            problem = None if default is _REQUIRED else default_problem(default, hints.get(f.name, Any))
            if problem:
                raise TypeError(f"{self.axis} {name!r}: the default of {cls.__qualname__}.{f.name}: {problem}")

    def _check_call(self, name: str, cls: type) -> None:
        """A plugin whose ``__call__`` cannot take the axis' arguments fails here, not mid-run."""
        if not self.calls:
            return
        defined = any("__call__" in k.__dict__ for k in cls.__mro__ if k is not object)
        try:
            signature = inspect.signature(cls.__call__) if defined else None
        except (TypeError, ValueError):  # no signature to read (a C callable): trust it
            return
        try:
            ok = signature is not None and bool(signature.bind(None, *self.calls))
        except TypeError:
            ok = False
        if not ok:
            takes = f"it takes {signature}" if signature else "it defines no __call__"
            fn = getattr(cls, "component_function", None)
            what, first = (fn.__qualname__, "params") if fn else (f"{cls.__qualname__}.__call__", "self")
            raise TypeError(f"{self.axis} {name!r}: {what} must take ({first}, {', '.join(self.calls)}); {takes}")

    def load_builtins(self) -> None:
        """Import the axis' package once (before plugins, so a plugin reusing a built-in name is refused)."""
        if self._loaded or self.package is None:
            return
        self._loaded = True
        pkg = importlib.import_module(self.package)
        for info in pkgutil.iter_modules(pkg.__path__, prefix=f"{self.package}."):
            importlib.import_module(info.name)

    def snapshot(self) -> dict[str, type]:
        return dict(self._entries)

    def restore(self, entries: dict[str, type]) -> None:
        """Put back a :meth:`snapshot` (what a plugin that failed to import had registered goes)."""
        self._entries = dict(entries)

    def names(self) -> list[str]:
        self.load_builtins()
        return sorted(self._entries)

    def get(self, name: str) -> type:
        self.load_builtins()
        if name not in self._entries:
            did = did_you_mean(name, self._entries)
            elsewhere = [r.axis for r in REGISTRIES.values() if r is not self and name in r._entries]
            where = (f"; {name!r} is registered as a {elsewhere[0]}, not a {self.axis}" if elsewhere else
                     f"; a data file is a source of its own: {{name: file, path: {name}}}" if _looks_like_a_file(name)
                     and self.axis == "source" else
                     f"; a plugin's component needs its file under `plugins:` and its "
                     f"`@{self.axis.upper()}.register({name!r})` decorator (`from klear_lab.registry import "
                     f"{self.axis.upper()}`)" if not did else "")
            raise ConfigError(
                f"unknown {self.axis} {name!r}{did}; registered: {', '.join(self.names())}{where}"
            )
        return self._entries[name]

    def params(self, name: str) -> dict[str, Any]:
        """Default hyperparameters of entry ``name`` as a plain dict."""
        return {f.name: _default(f) for f in dataclasses.fields(self.get(name))}

    def field_types(self, name: str) -> dict[str, Any]:
        cls = self.get(name)
        hints = typing.get_type_hints(cls)
        return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls)}

    def build(self, spec: Mapping[str, Any], **runtime: Any) -> Any:
        """Instantiate from ``{name: ..., **params}``; ``runtime`` adds non-config arguments."""
        kwargs = dict(spec)
        name = kwargs.pop("name")
        cls = self.get(name)
        try:
            return cls(**kwargs, **runtime)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{self.axis} {name!r}: {exc}") from exc

    def describe(self, name: str) -> tuple[str, list[tuple[str, str, Any]]]:
        """(docstring, [(field, type, default)]) for ``klear-lab components``."""
        cls = self.get(name)
        types = self.field_types(name)
        rows = [(f.name, _type_name(types[f.name]), _default(f)) for f in dataclasses.fields(cls)]
        return (cls.__doc__ or "").strip(), rows


_REQUIRED = object()


def _looks_like_a_file(name: str) -> bool:
    return "/" in name or name.endswith((".jsonl", ".json", ".parquet", ".arrow"))


def function_component(fn: Callable[..., Any], params: type) -> type:
    """A frozen dataclass subclass of ``params`` whose instances call ``fn(instance, *args)``: a function
    registered with its hyperparameters is built, described and checked as a class is. It carries ``fn``'s
    name, module, docstring and signature (``component_function``: ``fn``, where errors point)."""

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(self, *args, **kwargs)

    __call__.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined] # (params, ...): params is self
    namespace = {"__call__": __call__, "__doc__": fn.__doc__ or params.__doc__, "__module__": fn.__module__,
                 "__qualname__": fn.__qualname__, "component_function": staticmethod(fn)}
    return dataclasses.dataclass(frozen=True)(type(fn.__name__, (params,), namespace))


def _source(cls: type) -> str:
    try:
        return inspect.getfile(cls)
    except (TypeError, OSError):
        return f"{cls.__module__}.{cls.__qualname__}"


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return _REQUIRED


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is typing.Literal:  # its values are what a user needs to see
        return " | ".join(map(repr, typing.get_args(tp)))
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


SOURCE = Registry("source", "klear_lab.data.sources", "task/data sources producing records")
DATA_MIX = Registry("data_mix", "klear_lab.data.mixes", "how records from several sources are combined",
                    ("pools", "ranks", "seed"))
DIFFICULTY_FILTER = Registry("difficulty_filter", "klear_lab.data.filters", "offline record filters", ("records",))
MODEL = Registry("model", "klear_lab.models.builders", "tiny model architectures built from config")
CLIP = Registry("clip", "klear_lab.rl.clip", "policy-gradient surrogates (clip variants)",
                ("logp", "old_logp", "adv", "mask"))
AGGREGATION = Registry("aggregation", "klear_lab.rl.aggregation", "token-loss aggregation modes",
                       ("loss", "mask", "ctx"))
ADVANTAGE = Registry("advantage", "klear_lab.rl.advantages", "advantage estimators over groups", ("rewards",))
GROUP_FILTER = Registry("group_filter", "klear_lab.rl.group_filters", "online group filters", ("scores", "acc"))
REWARD = Registry("reward", "klear_lab.rewards", "rewards / verifiers", ("completions", "records"))
ROLLOUT = Registry("rollout", "klear_lab.rl.rollout", "rollout (generation) engines")

REGISTRIES: dict[str, Registry] = {
    r.axis: r
    for r in (SOURCE, DATA_MIX, DIFFICULTY_FILTER, MODEL, CLIP, AGGREGATION, ADVANTAGE, GROUP_FILTER, REWARD, ROLLOUT)
}


def _registered_by(cls: type) -> str:
    """Who registered ``cls``, as a user finds it: a built-in's module, a plugin's file (its module's name is
    made up from the file's hash: ``klear_plugin_ea11eef2c1d4_ae656c0c``)."""
    from klear_lab.plugins import plugin_origin

    origin = plugin_origin(cls)
    return f"{cls.__module__}.{cls.__qualname__}" if origin is None else f"{cls.__qualname__} in {origin}"
