"""Which host user the sandboxed program runs as, and how bwrap gets there (registers nothing).

The program must never be host root, even without capabilities: uid 0 owns ``/proc/sys``, the
read-only binds' files and root's kernel keyring. Three callers:

- **Not root** (the usual workstation): bwrap's user namespace maps the caller's own uid, and the
  program has no capabilities.
- **Root that can map ``nobody``, with CAP_SYS_ADMIN** (CI machines, a privileged container): bwrap
  makes no user namespace (one would map uid 0 to host root), keeps only CAP_SETUID/CAP_SETGID,
  and the trusted prelude becomes a uid of the run's own (:data:`SANDBOX_UIDS`, where the namespace
  maps them) before the program runs, so ``RLIMIT_NPROC`` counts that sandbox's threads alone.
  Where only ``nobody`` (65534) is mapped every sandbox is that uid, and ``RLIMIT_NPROC`` would be
  shared by all of them.
- **Root only inside a user namespace** (``unshare -r``, rootless containers: uid 0 maps to an
  unprivileged host uid): bwrap's own user namespace maps the program to 65534 inside, that host
  uid outside.

Where the program runs as the uid bwrap itself runs as (the first and third cases), bwrap leaves no process
of its own in the sandbox (``--as-pid-1``): its pid-1 reaper had none of the program's limits, and the program
could write into it through ``/proc/1/mem`` (a review ran 1.5 GiB there past a 256 MiB ``RLIMIT_AS``). The
seccomp filter already stops the forks a reaper would reap. Started by root, the reaper stays (host root, out
of the program's reach): it carries ``--die-with-parent`` for the program, whose own is cleared as the prelude
changes its uid.

Root that is host root without CAP_SYS_ADMIN (a container's default capability set) cannot make
the namespaces without running the program as host root, so it is refused with what to do.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import random
import stat
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

NOBODY = 65534
SANDBOX_UIDS = range(64_000, 65_000)  # started by root: a uid of the run's own, below nobody, above accounts
_CAP_SYS_ADMIN = 21


@dataclass(frozen=True)
class Isolation:
    """bwrap's namespace and capability options, and what the prelude has to do.

    Attributes:
        args: bwrap options (the prelude switches to 65534 wherever the program would start as uid 0).
        shared_uid: the prelude switches uid as root (no user namespace), to ``nobody`` unless
            ``own_uids``: then every sandbox is one host uid (``RLIMIT_NPROC`` counts them together).
        own_uids: each run may switch to a uid of its own from :data:`SANDBOX_UIDS` (all mapped).
    """

    args: tuple[str, ...]
    shared_uid: bool
    own_uids: bool = False


def choose_isolation(euid: int, uid_map: str, gid_map: str, cap_eff: int) -> Isolation:
    """Pick the isolation for a caller (``/proc/self/{uid,gid}_map`` text and its effective capabilities).

    Raises:
        RuntimeError: host root without CAP_SYS_ADMIN.
    """
    if euid != 0:
        return Isolation(("--unshare-all", "--as-pid-1", "--cap-drop", "ALL"), False)
    if _maps(uid_map, NOBODY) and _maps(gid_map, NOBODY) and cap_eff >> _CAP_SYS_ADMIN & 1:
        own = all(_maps(m, i) for m in (uid_map, gid_map) for i in (SANDBOX_UIDS[0], SANDBOX_UIDS[-1]))
        return Isolation(("--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                          "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"), True, own)
    if _outside(uid_map, 0) not in (None, 0):
        return Isolation(("--unshare-all", "--as-pid-1", "--uid", str(NOBODY), "--gid", str(NOBODY), "--cap-drop",
                          "ALL"), False)
    raise RuntimeError(
        "the code sandbox runs model-written code as an unprivileged user: this process is host root, and "
        "bwrap can only make the sandbox's namespaces through a user namespace that maps the program to host "
        "root, because the process lacks CAP_SYS_ADMIN (a container's default capabilities?) or cannot map "
        "nobody (65534). Run as a non-root user, or give the process CAP_SYS_ADMIN. Refusing to run "
        "model-written code as host root.")


def current_isolation() -> Isolation:
    """:func:`choose_isolation` for this process."""
    with open("/proc/self/uid_map") as uids, open("/proc/self/gid_map") as gids, open("/proc/self/status") as st:
        cap_eff = next(int(line.split()[1], 16) for line in st if line.startswith("CapEff:"))
        return choose_isolation(os.geteuid(), uids.read(), gids.read(), cap_eff)


def _ranges(id_map: str) -> list[tuple[int, int, int]]:
    return [(int(a), int(b), int(c)) for a, b, c in (line.split() for line in id_map.splitlines() if line.strip())]


def _maps(id_map: str, inside: int) -> bool:
    return _outside(id_map, inside) is not None


def _outside(id_map: str, inside: int) -> int | None:
    """The id in the parent namespace that ``inside`` maps to, or None when it is unmapped."""
    for first, outside, count in _ranges(id_map):
        if first <= inside < first + count:
            return outside + inside - first
    return None


LEASE_DIRS = (Path("/run/klear-sandbox-uids"), Path("/tmp/klear-sandbox-uids"))
"""Where root's sandbox runs lease their uids (a lock file per uid); the first that can be made safe."""
_UIDS_IN_USE: set[int] = set()
_UIDS_LOCK = threading.Lock()


@contextlib.contextmanager
def run_uid(own: bool) -> Iterator[int]:
    """The host uid one run started by root becomes: RLIMIT_NPROC counts the processes and threads of a
    uid, so sandboxes sharing ``nobody`` shared one count (and a thread bomb could take every pid of the
    host). Drawn from :data:`SANDBOX_UIDS` (unused by accounts): never one a concurrent run of this
    process holds, nor, through an ``flock`` on a lock file per uid, one of another process of this host
    (sweep workers, DDP ranks); the kernel drops a dead process's locks. ``own`` False (only ``nobody``
    mapped): ``nobody``."""
    if not own:
        yield NOBODY
        return
    with _UIDS_LOCK:
        free = [u for u in SANDBOX_UIDS if u not in _UIDS_IN_USE]
        random.SystemRandom().shuffle(free)
        uid, fd = lease_uid(free, lease_dir())
        _UIDS_IN_USE.add(uid)
    try:
        yield uid
    finally:
        with _UIDS_LOCK:
            _UIDS_IN_USE.discard(uid)
            if fd is not None:
                os.close(fd)  # releases the flock


def lease_uid(candidates: list[int], directory: Path | None) -> tuple[int, int | None]:
    """The first of ``candidates`` no other process holds, and the open lock file that holds it (close it to
    release). A lock file that cannot be opened or locked is skipped. Without a safe ``directory``, or with
    every candidate held elsewhere: the first, unleased, with a warning (once per process)."""
    for uid in candidates if directory is not None else ():
        try:
            fd = os.open(directory / str(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:  # say, a link planted where the lock file goes
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        return uid, fd
    _warn_unleased(directory)
    return candidates[0], None


@functools.cache
def _warn_unleased(directory: Path | None) -> None:
    where = f"every uid in {directory} is held" if directory else f"none of {', '.join(map(str, LEASE_DIRS))} is safe"
    warnings.warn(f"code sandbox: {where}; this run's uid is drawn without a lease and may share RLIMIT_NPROC "
                  "with a sandbox of another process", RuntimeWarning, stacklevel=3)


def lease_dir() -> Path | None:
    """The first of :data:`LEASE_DIRS` that is, or can be made, a directory owned by this (root) process and
    writable by no one else; None if neither can (say, another user made ``/tmp/klear-sandbox-uids``)."""
    for path in LEASE_DIRS:
        with contextlib.suppress(OSError):  # exists, or cannot be made here (a read-only /run...)
            os.mkdir(path, 0o700)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022:
            return path
    return None
