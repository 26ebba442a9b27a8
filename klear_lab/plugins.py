"""Out-of-tree components: ``plugins:`` in a config, and the ``klear_lab.plugins`` entry points.

A plugin is a module (importable name) or a ``.py`` file that registers components when
imported, e.g. ``@CLIP.register("my_clip")``. Every process that builds a run loads them (sweep
trials run in subprocesses and compose their own config), so a registry is never missing an
entry that the config names. One that registers nothing is warned about (its decorator missing).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import sys
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path

from klear_lab.errors import ConfigError
from klear_lab.plugin_helpers import (
    HELPERS_AS_IMPORTED,
    PLUGIN_DIRS,
    HelperClash,
    loaded_helpers,
    refuse_clashing_helpers,
    refuse_stale_helpers,
    warn_shadowed_helpers,
)
from klear_lab.plugin_imports import code_digest as code_digest  # importable from here too
from klear_lab.plugin_imports import helper_modules as helper_modules  # importable from here too
from klear_lab.plugin_imports import imported_names as imported_names
from klear_lab.plugin_imports import names_reached

ENTRY_POINT_GROUP = "klear_lab.plugins"
FILE_MODULE_PREFIX = "klear_plugin_"  # the module name a ``.py`` plugin file is imported under
_loaded_entry_points = False


def load_plugins(plugins: list[str], origin: str | list[str] = "config") -> None:
    """Import each plugin once; errors name the plugin and the layer that listed it (``origin``: one
    label, or one per plugin). Built-in components load first, so a plugin that reuses a built-in
    name is refused, and a plugin that fails to import leaves no registration behind."""
    origins = [origin] * len(plugins) if isinstance(origin, str) else origin
    if plugins:
        _load_builtins()
    for plugin, where in zip(plugins, origins, strict=True):
        if not isinstance(plugin, str):
            raise ConfigError(f"{where}: plugins entries must be strings, got {plugin!r}")
        if not plugin.strip():
            raise ConfigError(f"{where}: plugins entries name a .py file or an importable module, got {plugin!r}")
        what = f"{where}: plugin {plugin!r}"
        with _warned_if_it_registers_nothing(what, plugin), _refused_as_config_error(what, plugin):
            _import_file(Path(plugin)) if plugin.endswith(".py") else _import_module(plugin)


@contextlib.contextmanager
def _refused_as_config_error(what: str, plugin: str) -> Iterator[None]:
    """Any failure while importing a plugin is a ConfigError naming it; its registrations, and the modules
    it imported (a helper beside it registers too), are undone."""
    from klear_lab.registry import REGISTRIES

    before = {axis: registry.snapshot() for axis, registry in REGISTRIES.items()}
    modules = set(sys.modules)
    try:
        yield
    except BaseException as exc:
        for axis, entries in before.items():
            REGISTRIES[axis].restore(entries)
        for name in set(sys.modules) - modules:
            del sys.modules[name]
        if type(exc) is SystemExit:  # its exit code, and no word of which plugin or why
            raise ConfigError(f"{what}: it called sys.exit({exc.code!r}) while being imported") from None
        if isinstance(exc, ConfigError) or not isinstance(exc, Exception):  # KeyboardInterrupt
            raise
        raise ConfigError(f"{what}: {_reason(exc, plugin)}") from None


@contextlib.contextmanager
def _warned_if_it_registers_nothing(what: str, plugin: str) -> Iterator[None]:
    """Warn when importing ``plugin`` (a ``.py`` file or a module's name) ran its code and it registered no
    component: a missing ``@REGISTRY.register`` was found only as "unknown component" later. A plugin already
    imported (listed again, by another layer) runs nothing: not warned again. Registrations of a helper it imports
    count as its own, also when an earlier plugin imported that helper first (it is not run again)."""
    from klear_lab.registry import REGISTRIES, Registry

    before, modules = Registry.registrations, set(sys.modules)
    yield
    if set(sys.modules) <= modules or Registry.registrations > before or _registered_by_its_code(plugin):
        return
    *axes, last = REGISTRIES
    warnings.warn(f"{what} registered no component (no {', '.join(axes)} or {last}): its "
                  '`@REGISTRY.register("name")` decorator may be missing, e.g. `@CLIP.register("my_clip")` above '
                  "a frozen dataclass or a function", stacklevel=3)


def _registered_by_its_code(plugin: str) -> bool:
    """Whether an entry comes from a module that ``plugin``'s code imports (or, for a module plugin, from its
    package): registered when that module was first imported."""
    from klear_lab.registry import REGISTRIES

    names = names_reached(_code_file(plugin))
    if not plugin.endswith(".py"):
        names.add(plugin.split(".")[0])  # a module plugin's package
    names.discard("klear_lab")  # the built-ins: every plugin imports klear_lab.registry
    return any(cls.__module__.split(".")[0] in names for registry in REGISTRIES.values()
               for cls in registry.snapshot().values())


def _reason(exc: Exception, plugin: str) -> str:
    if isinstance(exc, HelperClash):
        return str(exc)
    if isinstance(exc, SyntaxError):
        return f"syntax error at {exc.filename}:{exc.lineno}: {exc.msg}"
    package = str(Path(__file__).resolve().parent) + os.sep
    frames = [f for f in traceback.extract_tb(exc.__traceback__)  # the plugin's line, not ours or importlib's
              if not f.filename.startswith((package, "<"))]
    own = [f for f in frames if plugin.endswith(".py") and Path(f.filename).resolve() == Path(plugin).resolve()]
    if isinstance(exc, (ImportError, FileNotFoundError)) and not own:  # the plugin itself: not found, say
        return f"cannot import it: {exc}"
    frames = own or frames
    line = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    if isinstance(exc, KeyError):  # a name registered twice: where this plugin registers it
        return f"{exc.args[0]}{f' (registered again at {line})' if line else ''}"
    return f"failed to import: {type(exc).__name__}: {exc}{f' at {line}' if line else ''}"


def _load_builtins() -> None:
    from klear_lab.registry import REGISTRIES

    for registry in REGISTRIES.values():
        registry.load_builtins()


def plugin_origin(cls: type) -> str | None:
    """Where a registered component comes from, for ``klear-lab components``: None for a built-in; a ``.py``
    plugin's file (relative to the working directory when under it); else its module's name (an entry
    point's package, a module plugin, or a module a plugin imported)."""
    module = cls.__module__
    if module == "klear_lab" or module.startswith("klear_lab."):
        return None
    if not module.startswith(FILE_MODULE_PREFIX):
        return module
    try:
        path = Path(inspect.getfile(cls))
    except (TypeError, OSError):  # generated code (exec) in a plugin: no file to name
        return module
    from klear_lab.console import shown_path

    return shown_path(path)


def plugin_digests(plugins: list[str]) -> list[str]:
    """What a run's identity records of its plugins: each file's (or module's) SHA-256, not its path,
    so the same code anywhere hashes alike and edited code does not. A path that cannot be read stays.
    Helper modules a plugin imports are not hashed (that would change earlier runs' hashes, and resume
    and sweeps match runs by hash); the run keeps copies of them (:func:`helper_modules`)."""
    out = []
    for plugin in plugins:
        path = _code_file(str(plugin))
        try:
            out.append("sha256:" + code_digest(path) if path else str(plugin))
        except OSError:
            out.append(str(plugin))
    return sorted(out)


def _code_file(plugin: str) -> Path | None:
    """A plugin's code: the ``.py`` file listed, or the ``.py`` file of the module named (None: none found)."""
    return Path(plugin) if plugin.endswith(".py") else _module_file(plugin)


def _module_file(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    return Path(spec.origin) if spec and spec.origin and spec.origin.endswith(".py") else None


def _import_module(name: str) -> None:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name.split(".")[0] and exc.name != name:
            raise
        raise ModuleNotFoundError(f"{exc} (a module plugin must be importable: install it or put its directory "
                                  "on PYTHONPATH, or list the .py file's path)") from None


def load_entry_point_plugins() -> None:
    """Import every installed package's ``klear_lab.plugins`` entry point (once per process)."""
    global _loaded_entry_points
    if _loaded_entry_points:
        return
    _loaded_entry_points = True
    entry_points = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    if entry_points:
        _load_builtins()
    for ep in entry_points:
        what = f"entry point {ep.name!r} ({ep.value}) in group {ENTRY_POINT_GROUP}"
        # refused as a module plugin is (the type, file and line of its error; its registrations undone): it said
        # only "failed to load: division by zero", and a name clash came quoted as a KeyError
        with _warned_if_it_registers_nothing(what, ep.module), _refused_as_config_error(what, ep.module):
            obj = ep.load()
            if callable(obj):
                obj()


def _import_file(path: Path) -> None:
    path = path.resolve()
    if path.is_dir():
        raise FileNotFoundError(f"{path} is a directory, not a .py file")
    if not path.is_file():
        raise FileNotFoundError(f"no such file {path}")
    versions = f"{FILE_MODULE_PREFIX}{hashlib.sha1(str(path).encode()).hexdigest()[:12]}_"  # this path's modules
    name = versions + code_digest(path)[:8]  # an edited file is imported again
    refuse_stale_helpers(path)
    if name in sys.modules:
        return
    refuse_clashing_helpers(path)
    warn_shadowed_helpers(path)
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))  # a plugin may import a helper module beside it
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    _forget_earlier_versions(versions, name)
    if path not in (dirs := PLUGIN_DIRS.setdefault(path.parent, [])):
        dirs.append(path)
    for helper in loaded_helpers(path):
        HELPERS_AS_IMPORTED.setdefault(helper, code_digest(helper))


def _forget_earlier_versions(versions: str, current: str) -> None:
    """After an edited plugin file imported again (a notebook): the modules of its earlier versions go, and
    the entries their classes hold that the current version did not register again, so that a name the edit
    renamed or removed no longer resolves, as in a fresh process. Done once the current version imported:
    one that fails leaves the earlier one in place. Entries are told by their class's module; a class that
    a helper module defines stays (the helper is not imported again)."""
    from klear_lab.registry import REGISTRIES

    earlier = {m for m in sys.modules if m.startswith(versions) and m != current}
    if not earlier:
        return
    for registry in REGISTRIES.values():
        registry.restore({k: cls for k, cls in registry.snapshot().items() if cls.__module__ not in earlier})
    for module in earlier:
        del sys.modules[module]
