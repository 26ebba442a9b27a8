"""Out-of-tree components: ``plugins:`` in a config, and the ``klear_lab.plugins`` entry points.

A plugin is a module (importable name) or a ``.py`` file that registers components when
imported, e.g. ``@CLIP.register("my_clip")``. Every process that builds a run loads them (sweep
trials run in subprocesses and compose their own config), so a registry is never missing an
entry that the config names.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import sys
from pathlib import Path

from klear_lab.errors import ConfigError

ENTRY_POINT_GROUP = "klear_lab.plugins"
_loaded_entry_points = False


def load_plugins(plugins: list[str], origin: str = "config") -> None:
    """Import each plugin once; errors name the plugin and the layer that listed it."""
    for plugin in plugins:
        if not isinstance(plugin, str):
            raise ConfigError(f"{origin}: plugins entries must be strings, got {plugin!r}")
        try:
            _import_file(Path(plugin)) if plugin.endswith(".py") else importlib.import_module(plugin)
        except ConfigError:
            raise
        except (ImportError, FileNotFoundError) as exc:
            raise ConfigError(f"{origin}: cannot import plugin {plugin!r}: {exc}") from None
        except KeyError as exc:  # duplicate registration
            raise ConfigError(f"{origin}: plugin {plugin!r}: {exc.args[0]}") from None


def load_entry_point_plugins() -> None:
    """Import every installed package's ``klear_lab.plugins`` entry point (once per process)."""
    global _loaded_entry_points
    if _loaded_entry_points:
        return
    _loaded_entry_points = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
        except Exception as exc:  # noqa: BLE001 - a broken plugin must say which one
            raise ConfigError(f"entry point {ep.name!r} ({ep.value}) in group {ENTRY_POINT_GROUP} "
                              f"failed to load: {exc}") from exc
        if callable(obj):
            obj()


def _import_file(path: Path) -> None:
    path = path.resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no such file {path}")
    name = "klear_plugin_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
