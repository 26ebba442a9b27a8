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
import difflib
import importlib
import pkgutil
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from klear_lab.errors import ConfigError

T = TypeVar("T")


class Registry:
    """Name -> frozen-dataclass component class for one axis."""

    def __init__(self, axis: str, package: str | None, doc: str) -> None:
        self.axis, self.package, self.doc = axis, package, doc
        self._entries: dict[str, type] = {}
        self._loaded = False

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        """Class decorator: ``@CLIP.register("gppo")`` on a frozen dataclass."""

        def deco(cls: type[T]) -> type[T]:
            if not dataclasses.is_dataclass(cls) or not cls.__dataclass_params__.frozen:
                raise TypeError(f"{self.axis} {name!r}: {cls.__qualname__} must be a frozen dataclass")
            if name in self._entries and self._entries[name] is not cls:
                old = self._entries[name]
                raise KeyError(
                    f"{self.axis} {name!r} is already registered by {old.__module__}.{old.__qualname__}"
                )
            self._entries[name] = cls
            if "registered_name" not in cls.__dict__:
                cls.registered_name = name  # type: ignore[attr-defined]
            return cls

        return deco

    def _ensure_loaded(self) -> None:
        if self._loaded or self.package is None:
            return
        self._loaded = True
        pkg = importlib.import_module(self.package)
        for info in pkgutil.iter_modules(pkg.__path__, prefix=f"{self.package}."):
            importlib.import_module(info.name)

    def names(self) -> list[str]:
        self._ensure_loaded()
        return sorted(self._entries)

    def get(self, name: str) -> type:
        self._ensure_loaded()
        if name not in self._entries:
            hint = difflib.get_close_matches(str(name), self._entries, n=1)
            did = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise ConfigError(
                f"unknown {self.axis} {name!r}{did}; registered: {', '.join(self.names())}"
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


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return None


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


SOURCE = Registry("source", "klear_lab.data.sources", "task/data sources producing records")
DATA_MIX = Registry("data_mix", "klear_lab.data.mixes", "how records from several sources are combined")
DIFFICULTY_FILTER = Registry("difficulty_filter", "klear_lab.data.filters", "offline record filters")
MODEL = Registry("model", "klear_lab.models.builders", "tiny model architectures built from config")
CLIP = Registry("clip", "klear_lab.rl.clip", "policy-gradient surrogates (clip variants)")
AGGREGATION = Registry("aggregation", "klear_lab.rl.aggregation", "token-loss aggregation modes")
ADVANTAGE = Registry("advantage", "klear_lab.rl.advantages", "advantage estimators over groups")
GROUP_FILTER = Registry("group_filter", "klear_lab.rl.group_filters", "online group filters")
REWARD = Registry("reward", "klear_lab.rewards", "rewards / verifiers")
ROLLOUT = Registry("rollout", "klear_lab.rl.rollout", "rollout (generation) engines")

REGISTRIES: dict[str, Registry] = {
    r.axis: r
    for r in (SOURCE, DATA_MIX, DIFFICULTY_FILTER, MODEL, CLIP, AGGREGATION, ADVANTAGE, GROUP_FILTER, REWARD, ROLLOUT)
}
