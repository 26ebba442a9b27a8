"""Run untrusted Python in a bubblewrap sandbox (registers nothing).

Each run is one ``bwrap`` process, started with an empty environment: pid, network (only a down
loopback), IPC, UTS and cgroup namespaces unshared, ``--die-with-parent``, ``--new-session``, an
empty root with read-only binds of ``/usr`` (and the ``/lib*``, ``/bin`` links) and of the
interpreter prefix ``sys.base_prefix`` only, a private tmpfs ``/tmp``, a cleared environment
(``PATH`` and ``LANG`` only), no capabilities, a seccomp filter that forbids new processes and new
namespaces or mounts, and rlimits (CPU, address space, file size, open files, processes) set by a
trusted prelude before the program runs. The project, ``$HOME``, the virtualenv and every variable
of the caller's environment stay invisible. A wall-clock timeout kills the whole process group (the
pid namespace takes every sandboxed process down with it).

The program is never host root: which host user it runs as, and how, is ``isolation.py``'s choice
(started by root, the prelude becomes a uid of the run's own, so that ``RLIMIT_NPROC`` counts this
sandbox alone). Either way the prelude refuses to run the program while it holds a capability, is
uid 0, or may gain privileges (``NoNewPrivs``).

Its stdout and stderr are pipes the host reads, each kept up to ``fsize_mb`` (a program that fills
stdout is ended there; the rest of stderr is read and dropped): a file the program could write to, it
could also truncate or rewrite, erasing the prelude's start marker and other runs' verdict lines.

There is no unisolated fallback: without ``bwrap`` every call raises RuntimeError.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from klear_lab.rewards.isolation import NOBODY, Isolation, current_isolation, run_uid
from klear_lab.rewards.sandbox_io import (
    end_namespace,
    exchange,
    namespace_init,
    pipe_with,
    read_to_eof,
    stop_bwrap,
)
from klear_lab.rewards.seccomp import no_fork_filter

INSTALL_HINT = "apt-get install -y bubblewrap"
START_LIMIT_S = 60.0
"""Seconds the sandbox may take to come up and take in the whole program, before the program's own clock
(``timeout_s``) starts. A sandbox still not up then is the host's failure, not the program's: RuntimeError
(it was scored as the program timing out, after the program's whole limit)."""
MARKER = "klear-sandbox"  # last argv entry of every sandboxed interpreter (to find leaks)
_BOOT_TAG = "\x00klear-sandbox-up\n"
_BOOT = f"""import os, resource, sys
for spec in sys.argv[1].split(","):
    name, value = spec.split("=")
    resource.setrlimit(getattr(resource, name), (int(value), int(value)))
if os.geteuid() == 0:
    _id = int(sys.argv[2])
    os.setgroups([]); os.setresgid(_id, _id, _id); os.setresuid(_id, _id, _id)
with open("/proc/self/status") as status:
    held = dict(line.split(":", 1) for line in status)
if os.geteuid() == 0 or int(held["CapEff"], 16) or held["NoNewPrivs"].strip() != "1":
    sys.exit("klear-sandbox: refusing to run with privileges: " + held["CapEff"].strip())
if not os.access(os.path.dirname(os.__file__), os.R_OK | os.X_OK):
    sys.exit(f"klear-sandbox: uid {{os.geteuid()}} cannot read the standard library in {{sys.base_prefix}}")
sys.stdout.write({_BOOT_TAG!r}); sys.stdout.flush()
src = sys.stdin.read()
null = os.open(os.devnull, os.O_RDONLY); os.dup2(null, 0); os.close(null)
sys.argv = ["main.py"]
del os, resource, spec, name, value, null, status, held
globals().pop("_id", None)
exec(compile(src, "main.py", "exec"), {{"__name__": "__main__"}})
"""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits inside the sandbox (official Klear code: Firejail, as 1024m, fsize 8m, nproc 32).

    Attributes:
        cpu_s: CPU seconds (RLIMIT_CPU); None = the wall-clock timeout, rounded up, + 1 s.
        memory_mb: address space (RLIMIT_AS).
        fsize_mb: largest file written (RLIMIT_FSIZE), stdout and stderr included.
        nofile: open files (RLIMIT_NOFILE).
        nproc: processes and threads of the program's uid (RLIMIT_NPROC). Not set where every
            sandbox is the same host uid (started by root), whose count would be shared by all
            concurrent sandboxes; there the seccomp filter stops new processes and RLIMIT_AS threads.
        tmpfs_mb: size of the private ``/tmp``.
    """

    cpu_s: int | None = None
    memory_mb: int = 1024
    fsize_mb: int = 8
    nofile: int = 32
    nproc: int = 32
    tmpfs_mb: int = 64

    def __post_init__(self) -> None:
        for name in ("memory_mb", "fsize_mb", "nofile", "nproc", "tmpfs_mb"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1 (a limit of 0 or less would be none), got {value!r}")
        if self.cpu_s is not None and (isinstance(self.cpu_s, bool) or not isinstance(self.cpu_s, int)
                                       or self.cpu_s < 1):
            raise ValueError(f"cpu_s must be an integer >= 1 or None, got {self.cpu_s!r}")

    def rlimit_spec(self, timeout_s: float, nproc: bool = True) -> str:
        """Return ``NAME=value,...`` for the prelude; CPU defaults to the wall clock, rounded up, and 1 s for
        the sandbox's start (which the wall clock does not count): a single-threaded program meets the
        wall-clock limit first, and times out, rather than being killed as a crash. No core
        files: where ``core_pattern`` pipes to a host helper (systemd-coredump, apport), a crash would
        hand the program's memory to a process outside the sandbox, which writes it to the host's disk.
        ``nproc=False`` leaves RLIMIT_NPROC out (every sandbox one host uid, the seccomp filter on)."""
        cpu = self.cpu_s if self.cpu_s is not None else math.ceil(timeout_s) + 1
        mib = 1 << 20
        return (f"RLIMIT_CPU={cpu},RLIMIT_AS={self.memory_mb * mib},RLIMIT_FSIZE={self.fsize_mb * mib},"
                f"RLIMIT_NOFILE={self.nofile},RLIMIT_CORE=0" + (f",RLIMIT_NPROC={self.nproc}" if nproc else ""))


@dataclass(frozen=True)
class SandboxResult:
    """What one sandboxed run left: exit code (negative = killed by that signal), output, timing."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float
    stalled: bool = False  # killed for a silent stdout (``idle_s``); ``timed_out`` is then True too
    line_s: tuple[float, ...] = ()  # when each line ``progress`` accepted came, in seconds from the start
    stdout_cap: int = 8 << 20  # bytes of stdout kept (``fsize_mb``)
    stdout_full: bool = False  # the program wrote at least that much: the rest was dropped
    fouled: bool = False  # ended at a line ``progress`` refused (None)
    ready_s: float | None = None  # when the sandbox was up and had the whole program (``idle_s``'s clock starts)


MISSING_BWRAP = ("bubblewrap (bwrap) is required to run untrusted code and was not found on PATH; "
                 f"install it with `{INSTALL_HINT}` (scripts/bootstrap.sh does). Refusing to run unisolated.")


def find_bwrap() -> str | None:
    """Path of ``bwrap`` on ``PATH`` (then ``/usr/bin``, ``/bin``), or None: the one lookup every sandbox makes."""
    return shutil.which("bwrap", path=_search_path())


def require_bwrap() -> str:
    """Path of ``bwrap``; RuntimeError (with the install command) if it is missing."""
    path = find_bwrap()
    if path is None:
        raise RuntimeError(MISSING_BWRAP)
    return path


class SandboxStartTimeout(RuntimeError):
    """The sandbox was not up within :data:`START_LIMIT_S`: the host was too loaded, or bwrap hangs."""


def _search_path() -> str:
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/bin", "/bin"])


def _python() -> tuple[str, str]:
    """(interpreter path, prefix to bind): the base interpreter, never the virtualenv."""
    prefix = os.path.realpath(sys.base_prefix)
    exe = getattr(sys, "_base_executable", "") or sys.executable
    exe = os.path.realpath(exe)
    if not exe.startswith(prefix + os.sep):
        exe = os.path.join(prefix, "bin", f"python{sys.version_info.major}.{sys.version_info.minor}")
    return exe, prefix


def _mounts(prefix: str, tmpfs_mb: int) -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    if not prefix.startswith("/usr/"):
        for parent in reversed(Path(prefix).parents[:-1]):  # bwrap would copy their modes (/root: 0700)
            args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", prefix, prefix]
    # the new root and /dev are tmpfs owned by the caller when bwrap runs unprivileged: writable and as
    # large as half the host's memory unless remounted read-only (only /tmp, of tmpfs_mb, is writable)
    return [*args, "--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev",
            "--perms", "1777", "--size", str(tmpfs_mb << 20), "--tmpfs", "/tmp", "--remount-ro", "/",
            "--chdir", "/tmp"]


def bwrap_argv(limits: SandboxLimits, timeout_s: float, seccomp_fd: int | None,
               isolation: Isolation | None = None, uid: int = NOBODY, info_fd: int | None = None) -> list[str]:
    """Build the full command line: bwrap options, the interpreter and the limit-setting prelude, which
    becomes ``uid`` where the program would start as uid 0. bwrap writes the sandbox's pid to ``info_fd``."""
    exe, prefix = _python()
    isolation = isolation or current_isolation()
    nproc = not (isolation.shared_uid and uid == NOBODY and seccomp_fd is not None)
    argv = [require_bwrap(), *isolation.args, "--hostname", "sandbox", "--die-with-parent", "--new-session",
            "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8",
            *_mounts(prefix, limits.tmpfs_mb)]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    return [*argv, exe, "-I", "-B", "-c", _BOOT, limits.rlimit_spec(timeout_s, nproc), str(uid), MARKER]


def run_python(
    source: str, *, timeout_s: float = 10.0, limits: SandboxLimits | None = None, idle_s: float | None = None,
    progress: Callable[[bytes], bool | None] | None = None,
) -> SandboxResult:
    """Run ``source`` as ``__main__`` in the sandbox (stdin is empty).

    Args:
        source: Python program text (fed on stdin to the prelude, never written on the host).
        timeout_s: the program's wall-clock limit, from when the sandbox is up and has the whole program
            (a loaded host's slow start is not the program's time; :data:`START_LIMIT_S` bounds it); on
            expiry the process group is killed.
        limits: resource limits; defaults to ``SandboxLimits()``.
        idle_s: also kill it once its stdout has been silent this long after its last output (the
            prelude's start marker, then the program's; not before the program is fed whole); ``stalled``
            says so. None: only ``timeout_s``.
            A program can keep it at bay by writing; only ``timeout_s`` bounds that.
        progress: with ``idle_s``, only a whole stdout line (its head, without the newline) it returns True
            for counts as output (so that a program cannot hold the silence limit off by writing anything
            else); only lines starting with ``{"`` are offered. ``line_s`` times the lines it accepted.
            A line it returns None for ends the run (``fouled``).

    Returns:
        The exit code, stdout and stderr (each capped by ``fsize_mb``) and whether it timed out.

    Raises:
        ValueError: ``timeout_s`` is not a finite number > 0.
        RuntimeError: bwrap is missing, or the sandbox itself failed to start or was not up within
            :data:`START_LIMIT_S`.
    """
    if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
        raise ValueError(f"timeout_s must be a finite number > 0, got {timeout_s!r}")
    if idle_s is not None and not (isinstance(idle_s, (int, float)) and math.isfinite(idle_s) and idle_s > 0):
        raise ValueError(f"idle_s must be a finite number > 0 or None, got {idle_s!r}")
    data = source.encode("utf-8", "replace")  # a lone surrogate is the program's bug, not the host's
    limits = limits or SandboxLimits()
    require_bwrap()  # before any pipe is opened
    isolation = current_isolation()  # refuses host root without CAP_SYS_ADMIN, also before
    with run_uid(isolation.own_uids) as uid:
        return _run(data, timeout_s, limits, isolation, uid, idle_s, progress)


def _run(data: bytes, timeout_s: float, limits: SandboxLimits, isolation: Isolation, uid: int,
         idle_s: float | None = None, progress: Callable[[bytes], bool | None] | None = None) -> SandboxResult:
    """One sandboxed run of the program ``data`` as host ``uid`` (:func:`run_python`)."""
    bpf = no_fork_filter()
    read_fd = pipe_with(bpf) if bpf is not None else None
    alive_r, alive_w = os.pipe()  # the sandbox inherits alive_w: EOF once every sandboxed process is gone
    info_r, info_w = os.pipe()  # bwrap writes the sandbox's pid 1 here, then closes it
    fds = (alive_w, info_w) if read_fd is None else (alive_w, info_w, read_fd)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            bwrap_argv(limits, timeout_s, read_fd, isolation, uid, info_w), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=fds, start_new_session=True,
            env={},  # pid 1 may be the caller's uid
        )
    except BaseException:
        os.close(alive_r)
        os.close(info_r)
        raise
    finally:
        for fd in fds:
            os.close(fd)
    init = None
    try:
        init = namespace_init(info_r, START_LIMIT_S, proc.pid)
        cap = limits.fsize_mb << 20
        start_left = max(START_LIMIT_S - (time.monotonic() - start), 0.01)
        out, err, timed_out, stalled, line_at, ended, ready = exchange(proc, data, timeout_s, start_left, cap,
                                                                       idle_s, progress)
    except BaseException:  # a Ctrl-C before the exchange took bwrap over, or one inside it
        stop_bwrap(proc)
        os.close(alive_r)
        raise
    finally:
        end_namespace(init)  # also where bwrap died first and its death signal did not end the program
    read_to_eof(alive_r, deadline_s=5.0)
    stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    booted = stdout.startswith(_BOOT_TAG)
    if ready is None and timed_out:
        raise SandboxStartTimeout(f"the bubblewrap sandbox was not up within {START_LIMIT_S:g} s (exit "
                           f"{proc.returncode}; the program never ran): {stderr[-500:]}")
    if not booted and not timed_out:
        raise RuntimeError(f"the bubblewrap sandbox failed to start (exit {proc.returncode}): "
                           f"{stderr[-500:]}")
    return SandboxResult(proc.returncode, stdout.removeprefix(_BOOT_TAG), stderr, timed_out,
                         time.monotonic() - start, stalled, tuple(t - start for t in line_at), cap, ended == "cap",
                         ended == "foul", None if ready is None else ready - start)
