"""What a plugin's code imports, read from the code (nothing is run): the top-level names a file imports, and
one walk that follows them to module files and on through those files' own imports. Each question about a
plugin's helpers is that walk with its own rule for which file a name stands for: the helpers Python would
import (:func:`helper_modules`), every file beside the plugin (the helper-clash check), a kept copy's kept
helpers (``klear_lab.plugin_copies``), the loaded modules beside it (:func:`names_reached`)."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path


def imported_names(path: Path) -> set[str]:
    """The top-level module names ``path`` imports (``import a.b``: ``a``; not relative imports), read from
    its code; none for a file that cannot be read or parsed."""
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def walk_imports(start: Path, match: Callable[[str], Path | None]) -> dict[str, Path]:
    """The modules ``start`` imports, and those they import, by name: each imported name that ``match`` turns
    into a file (None: not one, and not followed). A name found is followed once, its file read once."""
    found: dict[str, Path] = {}
    todo = [start]
    while todo:
        for name in sorted(imported_names(todo.pop()) - set(found)):
            file = match(name)
            if file is not None:
                found[name] = file
                todo.append(file)
    return found


def helper_modules(path: Path) -> list[Path]:
    """The readable ``.py`` modules beside ``path`` that it imports (``import helper``, ``from helper import
    x``), and those they import, found by reading the code (nothing is run). A name that imports from
    elsewhere (``random`` beside a ``random.py``: the plugin's directory comes last on ``sys.path``) is not
    one; packages and relative imports are not followed."""

    def helper(name: str) -> Path | None:
        file = path.parent / f"{name}.py"
        return file if is_beside(file, path) and os.access(file, os.R_OK) else None

    return sorted(walk_imports(path, helper).values())


def is_beside(helper: Path, plugin: Path) -> bool:
    """Whether ``import <helper's name>`` from ``plugin`` loads ``helper``: it exists, is not the plugin, and
    no module of that name is found before the plugin's directory on ``sys.path``."""
    if not helper.is_file() or helper.resolve() == plugin.resolve():
        return False
    try:
        spec = importlib.util.find_spec(helper.stem)
    except (ImportError, ValueError):
        return True
    return spec is None or spec.origin is None or Path(spec.origin).resolve() == helper.resolve()


def names_reached(path: Path | None) -> set[str]:
    """The top-level names imported by ``path`` and by the loaded modules beside it that it imports, on through
    theirs (a helper ``helper.py``, or a kept copy's ``helper-SHA8.py`` loaded as ``helper``): the modules whose
    registrations a plugin's import counts as its own, when they were imported before it (a helper two plugins
    share). Read after the import; none for no file."""
    if path is None:
        return set()
    folder = path.resolve().parent

    def loaded_beside(name: str) -> Path | None:
        file = getattr(sys.modules.get(name), "__file__", None)
        return Path(file).resolve() if file and Path(file).resolve().parent == folder else None

    files = [path, *walk_imports(path, loaded_beside).values()]
    return set().union(*map(imported_names, files))


def code_digest(path: Path) -> str:
    """SHA-256 of a plugin file's bytes: its identity, its module name's suffix, its saved copy's name."""
    return hashlib.sha256(path.read_bytes()).hexdigest()
