"""Helper modules beside ``.py`` plugins (``import helper`` of a ``helper.py`` in the plugin's folder), as one
process holds them: two plugin folders' helpers of one name with other code are refused (the second plugin ran the
first one's helper without a word), and so is a helper edited since this process imported it (Python does not
import a module again: a notebook's next run ran it stale while the run kept a copy of the new code)."""

from __future__ import annotations

import sys
from pathlib import Path

from klear_lab.plugin_imports import code_digest, walk_imports

PLUGIN_DIRS: dict[Path, list[Path]] = {}  # each directory ``.py`` plugins were imported from: those plugins


class HelperClash(Exception):
    """Two plugins' helper modules of one name in different directories: one process holds one module per name."""


def refuse_clashing_helpers(path: Path) -> None:
    """Refuse ``path`` when a module it imports by the name of a file beside it is already loaded from another
    plugin's directory with other code: ``a/utils.py`` and ``b/utils.py`` both ``import utils``, and b's plugin
    ran a's ``utils`` without a word (its run kept one ``utils`` copy). A module loaded from elsewhere
    (``random`` beside a ``random.py``) is what a fresh process would import too: not a clash."""
    for name, helper in _files_beside(path).items():
        loaded = _loaded_file(name)
        if loaded is None or loaded == helper.resolve() or loaded.parent not in PLUGIN_DIRS:
            continue
        if _same_code(loaded, helper):  # the same code in two places: harmless
            continue
        others = PLUGIN_DIRS[loaded.parent]
        other = next((p for p in others if name in _files_beside(p)), others[0])
        from klear_lab.plugin_copies import is_kept_copy

        fix = (f"Rename one of the two helper files, {helper} or {loaded}, and the imports of it" if not
               any(map(is_kept_copy, (loaded, helper))) else "One is a run's kept copy of the other, edited since: "
               "run the saved config and the edited plugin in separate processes")
        raise HelperClash(
            f"it imports {name!r}, the helper {helper} beside it, but plugin {other} already imported {name!r} from "
            f"{loaded}, and one process holds one module per name: {path.name} would run {loaded}. {fix}")


def _files_beside(path: Path) -> dict[str, Path]:
    """The ``.py`` files beside ``path`` that it imports by name, and those they import (read, not run)."""

    def beside(name: str) -> Path | None:
        file = path.parent / f"{name}.py"
        return file if file.is_file() and file.resolve() != path.resolve() else None

    return walk_imports(path, beside)


def _loaded_file(name: str) -> Path | None:
    file = getattr(sys.modules.get(name), "__file__", None)
    return Path(file).resolve() if file else None


HELPERS_AS_IMPORTED: dict[Path, str] = {}  # a plugin's helper module file -> its code digest when it was loaded


def loaded_helpers(path: Path) -> list[Path]:
    """The helper modules beside plugin ``path`` that it imports and that this process loaded from there."""
    return [helper.resolve() for name, helper in _files_beside(path).items() if _loaded_file(name) == helper.resolve()]


def refuse_stale_helpers(path: Path) -> None:
    """Refuse ``path`` when a helper module it imports was edited since this process loaded it: Python keeps a
    module's first import, so a notebook's second run ran the old helper while the run kept a copy of the new one
    (an edited plugin file itself is imported again: its module's name carries its digest)."""
    for helper in loaded_helpers(path):
        try:
            now = code_digest(helper)
        except OSError:  # deleted since: the module loaded is what runs, and a rerun names the file gone
            continue
        if HELPERS_AS_IMPORTED.get(helper, now) != now:
            raise HelperClash(f"its helper module {helper} was edited since this process imported it, and Python "
                              "does not import a module again: this process would go on with the old code while a "
                              "run keeps the new. Run it in a new process (in a notebook, restart the kernel; in a "
                              "sweep, put the file back as it was: its earlier trials ran that)")


def warn_shadowed_helpers(path: Path) -> None:
    """Warn when ``path`` imports a name that a ``.py`` file beside it has, but Python finds a module of that name
    first (``random.py`` beside the plugin: the standard library's ``random`` loads): the helper never runs, and the
    plugin failed on a missing attribute, or ran the other module, without a word. Where what loads is another
    plugin folder's file of that name (on ``sys.path`` since its plugin loaded), other code is a clash
    (:class:`HelperClash`, as :func:`refuse_clashing_helpers` refuses one already imported) and the same code is
    harmless."""
    import importlib.util
    import warnings

    from klear_lab.plugin_imports import is_beside

    for name, helper in _files_beside(path).items():
        if is_beside(helper, path):
            continue
        try:
            origin = getattr(importlib.util.find_spec(name), "origin", None)
        except (ImportError, ValueError):
            origin = None
        found = Path(origin).resolve() if origin else None
        if found is not None and found.parent in PLUGIN_DIRS:
            if _same_code(found, helper):
                continue
            raise HelperClash(f"it imports {name!r}, the helper {helper} beside it, but {found} (beside plugin "
                              f"{PLUGIN_DIRS[found.parent][0]}, loaded before) is found first, and one process holds "
                              f"one module per name: {path.name} would run {found}. Rename one of the two helper "
                              "files, and the imports of it")
        warnings.warn(f"plugin {path}: `import {name}` loads {origin or 'a module of that name'}, not the helper "
                      f"{helper} beside it (a module of that name comes first on sys.path, the standard library's "
                      "or an installed one): rename the helper file and its imports", UserWarning, stacklevel=2)


def _same_code(a: Path, b: Path) -> bool:
    try:
        return code_digest(a) == code_digest(b)
    except OSError:
        return False
