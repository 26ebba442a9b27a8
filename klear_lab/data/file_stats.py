"""Which data files a run reads, by size, modification time and change time: a run keeps them in ``run.json`` so
that a starting point's data is known unchanged without reading a paper-scale corpus again in every trial.

The change time (``st_ctime_ns``) is there because size and mtime can be put back: a file edited and dated back
(``touch -r``), or restored with ``cp -p``, showed the size and mtime of records a run did not train on. No call
sets the change time; a file that merely looks changed (moved, ``chmod``) has its records read and compared."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from klear_lab.builders import source_nodes, source_path


def data_file_stats(cfg: dict[str, Any]) -> dict[str, list[int]] | None:
    """``{file: [size, mtime_ns, ctime_ns]}`` of the data files ``cfg`` reads (each file of a dataset directory), when
    every source reads a file or a directory (None otherwise: a generated world or a hub id). A run keeps
    them in ``run.json``, so a starting point's data is known unchanged without reading a paper-scale
    corpus again in every trial."""
    out: dict[str, list[int]] = {}
    for _, split, _, node in source_nodes(cfg):
        path = source_path(node, split)
        found = Path(path).expanduser() if path else None
        if found is None or not found.exists():
            return None
        files = _files_under(found) if found.is_dir() else [found]
        if files is None:
            return None
        for file in files:
            stat = file.stat()
            out[str(file.resolve())] = [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]
    return out or None


def _files_under(directory: Path) -> list[Path] | None:
    """Every file under ``directory``, through symlinked folders as a dataset loader follows them (None when a
    folder cannot be listed: then its files cannot be known unchanged)."""
    failed: list[OSError] = []
    found = [Path(root) / name for root, _, names in os.walk(directory, onerror=failed.append, followlinks=True)
             for name in names]
    return None if failed else sorted(f for f in found if f.is_file())
