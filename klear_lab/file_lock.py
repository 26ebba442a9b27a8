"""An exclusive ``flock`` on a lock file that goes away with the lock.

Parallel sweep workers train a starting point once by holding a lock file per parent config while one of
them trains it. Such files stayed behind for good, one per parent config and seed (``.init-HASH-sSEED.lock``
beside the runs), also after Ctrl-C or a SIGTERM. Removing a lock file that others wait on needs care:
a waiter woken by the removal holds a file no one else can open any more, and a third process creating
the file anew would hold "the lock" at the same time. So each process, once it holds the lock, checks
that the file it locked is still the one at the path, and opens the path again if not.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def exclusive_lock(path: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing) for the block, then remove the file.

    Args:
        path: the lock file.
        on_wait: called once, before waiting, when another process holds the lock.
    """
    fd = _lock(path, on_wait)
    assert fd is not None  # it waited
    with _held(fd, path):
        yield


@contextlib.contextmanager
def lock_if_free(path: Path) -> Iterator[bool]:
    """:func:`exclusive_lock` where no other process holds it: yields True, holding it for the block (then
    removes the file), else False at once, holding nothing."""
    fd = _lock(path, None, wait=False)
    if fd is None:
        yield False
        return
    with _held(fd, path):
        yield True


@contextlib.contextmanager
def _held(fd: int, path: Path) -> Iterator[None]:
    try:
        yield
    finally:
        try:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # while held: a process waiting on this file finds it gone and opens the path again
        finally:
            os.close(fd)  # releases the lock (also after a Ctrl-C in the unlink)


def _lock(path: Path, on_wait: Callable[[], None] | None, wait: bool = True) -> int | None:
    """An open descriptor of the file at ``path``, exclusively locked, and still the file at ``path``; None,
    without ``wait``, where another process holds it."""
    while True:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not wait:
                    os.close(fd)
                    return None
                if on_wait is not None:
                    on_wait()
                    on_wait = None
                fcntl.flock(fd, fcntl.LOCK_EX)
            if _is_file_at(fd, path):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # its holder removed it as we waited: lock the file now at the path


def _is_file_at(fd: int, path: Path) -> bool:
    """Whether the open file ``fd`` is the file now at ``path`` (not one removed since it was opened)."""
    try:
        at_path = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (at_path.st_dev, at_path.st_ino)
