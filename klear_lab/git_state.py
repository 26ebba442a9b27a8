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


NEW_FILE_LIMIT = 1_000_000
"""Bytes of a new, untracked file a ``+dirty`` run's diff takes in whole; a larger one (generated data) is named
in the diff's header, not copied into it."""
PATCH_FLAGS = ("--binary", "--no-color", "--no-ext-diff", "--no-textconv", "--src-prefix=a/", "--dst-prefix=b/")
"""What makes a diff apply whatever the user's git config says: binary files in full, no external diff or
textconv, the a/ b/ prefixes ``git apply`` expects (``diff.noprefix`` would drop them)."""


def code_diff(path: Path | None = None) -> tuple[bytes, list[str]]:
    """What ``+dirty`` stands for, as a patch of bytes that ``git apply`` at the commit's repository root turns
    back into the code the run ran: ``git diff HEAD`` of the repository holding ``path`` (default: this package;
    staged and unstaged changes to tracked files, binary ones included) and each new, not ignored file under
    ``path`` as an added file. Also the new files left out (larger than :data:`NEW_FILE_LIMIT`), named in the
    patch's header, which ``git apply`` skips. Raises OSError or SubprocessError where git cannot say."""
    where = (path or Path(__file__).resolve().parent).resolve()

    def git(*args: str, cwd: Path = where, ok: tuple[int, ...] = (0,)) -> bytes:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=60)
        if out.returncode not in ok or (out.returncode and out.stderr):  # --no-index: 1 is "differs", not an error
            raise subprocess.CalledProcessError(out.returncode, args, out.stdout, out.stderr)
        return out.stdout

    top = Path(git("rev-parse", "--show-toplevel").decode().strip())
    parts = [git("diff", "HEAD", *PATCH_FLAGS, cwd=top)]
    left_out = []
    for name in filter(None, git("ls-files", "-z", "--others", "--exclude-standard", "--full-name", "--",
                                 ".").decode("utf-8", "surrogateescape").split("\0")):
        if (top / name).stat().st_size > NEW_FILE_LIMIT:
            left_out.append(name)
            continue
        parts.append(git("diff", "--no-index", *PATCH_FLAGS, "--", "/dev/null", name, cwd=top, ok=(0, 1)))
    header = "".join(f"# left out (a new file over {NEW_FILE_LIMIT} bytes): {n}\n" for n in left_out)
    return header.encode("utf-8", "surrogateescape") + b"".join(parts), left_out


def save_code_diff(run_dir: Path, commit: str, attempt: int = 1, path: Path | None = None) -> str | None:
    """Write :func:`code_diff` (of ``path``'s repository) beside a run whose ``commit`` is ``+dirty``
    (``code.diff``, or ``code-attempt-N.diff`` for a resumed attempt) and return the file's name; None for a
    clean commit, or with a warning where it could not be made or written: the run goes on without it."""
    import sys

    from klear_lab.tracking import atomic_write

    if not commit.endswith("+dirty"):
        return None
    name = "code.diff" if attempt <= 1 else f"code-attempt-{attempt}.diff"
    try:
        diff, left_out = code_diff(path)
        atomic_write(run_dir / name, lambda tmp: tmp.write_bytes(diff))
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", None) or b""
        reason = detail.decode(errors="replace").strip() if isinstance(detail, bytes) else str(exc)
        print(f"warning: {run_dir}: the code is {commit}, and its diff could not be kept in {name}: "
              f"{reason or exc}", file=sys.stderr)
        return None
    if left_out:
        print(f"warning: {run_dir}: {name} leaves out {len(left_out)} new file(s) over {NEW_FILE_LIMIT} bytes "
              f"({', '.join(left_out[:3])}{', ...' if len(left_out) > 3 else ''}); the run's code needs them too",
              file=sys.stderr)
    return name
