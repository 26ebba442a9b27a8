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


DIFF_LIMIT = 5_000_000
"""Characters of a ``+dirty`` run's diff kept beside it: a tree holding large generated files is cut there."""


def code_diff(path: Path | None = None) -> str:
    """What ``+dirty`` stands for: ``git diff HEAD`` of the repository holding ``path`` (default: this package;
    staged and unstaged changes to tracked files) and each new, not ignored file under ``path`` as an added file,
    so that a run's commit and this diff give the code it ran (``git apply`` at the repository's root). Empty
    outside a repository."""
    where = (path or Path(__file__).resolve().parent).resolve()

    def git(*args: str, cwd: Path = where, ok: tuple[int, ...] = (0,)) -> str:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30)
        if out.returncode not in ok:
            raise subprocess.CalledProcessError(out.returncode, args)
        return out.stdout

    try:
        top = Path(git("rev-parse", "--show-toplevel").strip())
        parts = [git("diff", "HEAD", "--no-color", cwd=top)]
        new_files = git("ls-files", "--others", "--exclude-standard", "--full-name", "--", ".").splitlines()
        parts += [git("diff", "--no-color", "--no-index", "--", "/dev/null", f, cwd=top, ok=(0, 1)) for f in new_files]
    except (OSError, subprocess.SubprocessError, UnicodeDecodeError):
        return ""
    diff = "".join(parts)
    return diff if len(diff) <= DIFF_LIMIT else diff[:DIFF_LIMIT] + f"\n[cut at {DIFF_LIMIT} characters]\n"


def save_code_diff(run_dir: Path, commit: str, attempt: int = 1, path: Path | None = None) -> str | None:
    """Write :func:`code_diff` (of ``path``'s repository) beside a run whose ``commit`` is ``+dirty``
    (``code.diff``, or ``code-attempt-N.diff`` for a resumed attempt) and return the file's name; None for a
    clean commit."""
    from klear_lab.tracking import atomic_write

    if not commit.endswith("+dirty") or not (diff := code_diff(path)):
        return None
    name = "code.diff" if attempt <= 1 else f"code-attempt-{attempt}.diff"
    atomic_write(run_dir / name, lambda tmp: tmp.write_text(diff))
    return name
