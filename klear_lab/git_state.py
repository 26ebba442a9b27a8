"""The code a run ran: the commit of the repository holding klear-lab, and whether the tree differs from it."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git_commit(path: Path | None = None) -> str:
    """HEAD of the repository holding ``path`` (default: this package), or ``unknown``.

    ``+dirty`` when a tracked file has changes, or when a file under ``path`` is new and not ignored: a clip
    variant or reward added to the package and not committed yet is code the run used that HEAD does not hold.
    New files elsewhere in the repository (notes, experiment YAMLs, whose resolved config the run saves) are not.
    """
    cwd = str(path or Path(__file__).resolve().parent)

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()

    try:
        sha = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no") or git("ls-files", "--others",
                                                                              "--exclude-standard", "--", ".")
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
