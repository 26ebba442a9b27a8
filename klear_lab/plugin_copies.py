"""The copies of plugin code a run keeps (``RUN_DIR/plugins/NAME-SHA8.py``, :func:`klear_lab.tracking.write_config`),
and a rerun or resume on them once the plugin file is gone: a run stays reproducible from its saved config."""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import sys
import warnings
from pathlib import Path
from typing import Any

from klear_lab.plugin_imports import helper_modules, walk_imports
from klear_lab.plugins import code_digest

SHA8 = "[0-9a-f]" * 8


def kept_copy_name(source: Path) -> str:
    """The name of the copy a run keeps of plugin code ``source``: ``NAME-SHA8.py``, or ``source``'s own name
    when it already is such a copy (a rerun or resume on a kept copy keeps ``NAME-SHA8.py``, not
    ``NAME-SHA8-SHA8.py``)."""
    return source.name if is_kept_copy(source) else f"{source.stem}-{code_digest(source)[:8]}.py"


def is_kept_copy(path: Path) -> bool:
    """Whether ``path`` is named as the copy a run keeps of its code: ``NAME-`` and its digest's 8 digits."""
    return path.stem.endswith(f"-{code_digest(path)[:8]}")


def kept_sources(plugin: Path) -> list[Path]:
    """The code files a run keeps a copy of for the ``.py`` plugin ``plugin``: the plugin and the helper modules
    beside it that it imports, whether as ``helper.py`` or, for a kept copy, as the copy ``helper-SHA8.py``."""
    helpers = helper_modules(plugin) + (list(_kept_helpers(plugin).values()) if is_kept_copy(plugin) else [])
    return [plugin, *dict.fromkeys(helpers)]


def with_kept_copies(plugins: list[Any], origins: list[str]) -> list[Any]:
    """``plugins`` with each ``.py`` file that is gone, or whose code or whose helpers' code changed since, replaced
    by the copy of its code that a run kept, where the layer listing it is that run's saved ``config.yaml``
    (warned): the run stays reproducible from its saved config after the original file moved, was deleted or was
    edited (a review's edited reward ran silently on a rerun; then an edited helper, on a rerun and a resume under
    the same hash). Its hash covers the code, not the path: unchanged.
    The helper modules the copy imports are then imported from their kept copies by their own names."""
    out = []
    for plugin, where in zip(plugins, origins, strict=True):
        copy = _kept_copy(plugin, where) if isinstance(plugin, str) and plugin.endswith(".py") else None
        why = _why_the_copy(plugin, copy) if copy is not None else None
        if copy is not None and why is not None:
            if why:
                warnings.warn(f"{where}: {why}", stacklevel=2)
                plugin = str(copy.resolve())  # the saved config works from any cwd
            _serve_helpers(copy)
        out.append(plugin)
    return out


def _why_the_copy(plugin: str, copy: Path) -> str | None:
    """Why the kept ``copy`` runs instead of ``plugin`` (the warning); "" when ``plugin`` is that copy (a saved
    config of a resume on it: its helpers come from their copies too); None when ``plugin`` runs, its code and
    its helpers' code being what the run kept."""
    path = Path(plugin).expanduser()
    if not path.is_file():
        return f"plugin {plugin!r} is gone; the copy of its code this run kept is used: {copy}"
    if copy.resolve() == path.resolve():
        return ""
    if not is_kept_copy(copy):
        return None
    new = "(the experiment file runs the new code)"
    if not _same_code(path, copy):
        return f"plugin {plugin!r} changed since this run started; the copy of the code it ran is used: {copy} {new}"
    for name, kept in _kept_helpers(copy).items():  # and the helpers' own helpers
        helper = path.parent / f"{name}.py"
        if not helper.is_file() or not _same_code(helper, kept):
            how = "changed since this run started" if helper.is_file() else "is gone"
            return (f"helper module {helper} of plugin {plugin!r} {how}; the copies of the code the run ran are "
                    f"used: {copy} and its helpers' copies beside it, {kept.name} among them {new}")
    return None


def _same_code(plugin: Path, copy: Path) -> bool:
    """Whether the plugin file holds the code its kept copy does (the copy's name carries its digest); not when it
    cannot be read."""
    try:
        return code_digest(plugin)[:8] == copy.stem.rsplit("-", 1)[-1]
    except OSError:
        return False


INDEX = "index.json"  # in RUN_DIR/plugins/: each listed plugin -> the name of its kept copy


def write_kept_index(kept: Path, index: dict[str, str]) -> None:
    """Add ``index`` (plugin as the config lists it -> its copy's name) to ``kept``'s index, written whole."""
    from klear_lab.tracking import write_json

    write_json(kept / INDEX, {**_read_index(kept), **index})


def _read_index(kept: Path) -> dict[str, str]:
    try:
        index = json.loads((kept / INDEX).read_text())
    except (OSError, ValueError):
        return {}
    return index if isinstance(index, dict) else {}


def _kept_copy(plugin: str, where: str) -> Path | None:
    """The copy a run kept of a ``.py`` plugin when the layer listing it is that run's saved ``config.yaml``, or
    None. A saved config may name a kept copy itself (a resume on one), in a run directory since moved. Which copy
    is the plugin's: the run's index says; a run from before it, its one copy of that name, else the one holding
    the plugin's code as it is now (two plugins of one file name in two folders kept two)."""
    for part in where.split(" + "):
        layer = Path(part.strip())
        if layer.name == "config.yaml":
            kept = layer.parent / "plugins"
            exact = kept / (_read_index(kept).get(plugin) or Path(plugin).name)
            copies = [exact] if exact.is_file() else sorted(kept.glob(f"{Path(plugin).stem}-{SHA8}.py"))
            same = [c for c in copies if Path(plugin).expanduser().is_file() and _same_code(Path(plugin), c)]
            if copies:
                return (same or copies)[-1]
    return None


class _KeptHelperFinder(importlib.abc.MetaPathFinder):
    """Imports ``helper`` from its kept copy ``helper-SHA8.py`` (``import helper`` in a kept plugin copy). First
    on ``sys.meta_path``, for the names :func:`_kept_helpers` found nowhere else before any plugin loaded (a
    module found elsewhere wins, as the plugin's directory came last on ``sys.path``): another plugin from the
    original directory puts it on ``sys.path``, and its edited ``helper.py`` must not win over the copy."""

    def __init__(self) -> None:
        self.files: dict[str, Path] = {}

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        file = self.files.get(name) if path is None else None
        return importlib.util.spec_from_file_location(name, file) if file else None


_FINDER = _KeptHelperFinder()


def _serve_helpers(copy: Path) -> None:
    """Make the helper modules ``copy`` imports importable by name from their kept copies beside it."""
    helpers = _kept_helpers(copy)
    if helpers:
        _FINDER.files.update(helpers)
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)


def _kept_helpers(copy: Path) -> dict[str, Path]:
    """The kept copies beside ``copy`` (``NAME-SHA8.py``) of the modules it imports, and those they import, by
    module name; a name that imports from elsewhere is not one."""

    def kept_helper(name: str) -> Path | None:
        copies = sorted(copy.parent.glob(f"{name}-{SHA8}.py"))
        return copies[-1].resolve() if copies and not _found_elsewhere(name) else None

    return walk_imports(copy, kept_helper)


def _found_elsewhere(name: str) -> bool:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    return spec is not None and not (spec.origin and Path(spec.origin) in _FINDER.files.values())
