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
(started by root, the prelude becomes ``nobody``). Either way the prelude refuses to run the program
while it holds a capability, is uid 0, or may gain privileges (``NoNewPrivs``).

There is no unisolated fallback: without ``bwrap`` every call raises RuntimeError.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from klear_lab.rewards.isolation import NOBODY, Isolation, current_isolation
from klear_lab.rewards.seccomp import no_fork_filter

INSTALL_HINT = "apt-get install -y bubblewrap"
MARKER = "klear-sandbox"  # last argv entry of every sandboxed interpreter (to find leaks)
_BOOT_TAG = "\x00klear-sandbox-up\n"
_BOOT = f"""import os, resource, sys
for spec in sys.argv[1].split(","):
    name, value = spec.split("=")
    resource.setrlimit(getattr(resource, name), (int(value), int(value)))
if os.geteuid() == 0:
    os.setgroups([]); os.setresgid({NOBODY}, {NOBODY}, {NOBODY}); os.setresuid({NOBODY}, {NOBODY}, {NOBODY})
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
exec(compile(src, "main.py", "exec"), {{"__name__": "__main__"}})
"""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits inside the sandbox (official Klear code: Firejail, as 1024m, fsize 8m, nproc 32).

    Attributes:
        cpu_s: CPU seconds (RLIMIT_CPU); None = the wall-clock timeout, rounded up.
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

    def rlimit_spec(self, timeout_s: float, nproc: bool = True) -> str:
        """Return ``NAME=value,...`` for the prelude; CPU defaults to the wall clock, rounded up.
        ``nproc=False`` leaves RLIMIT_NPROC out (every sandbox one host uid, the seccomp filter on)."""
        cpu = self.cpu_s if self.cpu_s is not None else max(1, math.ceil(timeout_s))
        mib = 1 << 20
        return (f"RLIMIT_CPU={cpu},RLIMIT_AS={self.memory_mb * mib},RLIMIT_FSIZE={self.fsize_mb * mib},"
                f"RLIMIT_NOFILE={self.nofile}" + (f",RLIMIT_NPROC={self.nproc}" if nproc else ""))


@dataclass(frozen=True)
class SandboxResult:
    """What one sandboxed run left: exit code (negative = killed by that signal), output, timing."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float


def require_bwrap() -> str:
    """Path of ``bwrap``; RuntimeError (with the install command) if it is missing."""
    path = shutil.which("bwrap", path=_search_path())
    if path is None:
        raise RuntimeError(
            "bubblewrap (bwrap) is required to run untrusted code and was not found on PATH; "
            f"install it with `{INSTALL_HINT}` (scripts/bootstrap.sh does). Refusing to run unisolated."
        )
    return path


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
    return [*args, "--proc", "/proc", "--dev", "/dev",
            "--perms", "1777", "--size", str(tmpfs_mb << 20), "--tmpfs", "/tmp", "--chdir", "/tmp"]


def bwrap_argv(limits: SandboxLimits, timeout_s: float, seccomp_fd: int | None,
               isolation: Isolation | None = None) -> list[str]:
    """Build the full command line: bwrap options, the interpreter and the limit-setting prelude."""
    exe, prefix = _python()
    isolation = isolation or current_isolation()
    nproc = not (isolation.shared_uid and seccomp_fd is not None)
    argv = [require_bwrap(), *isolation.args, "--die-with-parent", "--new-session",
            "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8",
            *_mounts(prefix, limits.tmpfs_mb)]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    return [*argv, exe, "-I", "-B", "-c", _BOOT, limits.rlimit_spec(timeout_s, nproc), MARKER]


def run_python(
    source: str, *, timeout_s: float = 10.0, limits: SandboxLimits | None = None
) -> SandboxResult:
    """Run ``source`` as ``__main__`` in the sandbox (stdin is empty).

    Args:
        source: Python program text (fed on stdin to the prelude, never written on the host).
        timeout_s: wall-clock limit; on expiry the process group is killed.
        limits: resource limits; defaults to ``SandboxLimits()``.

    Returns:
        The exit code, stdout and stderr (each capped by ``fsize_mb``) and whether it timed out.

    Raises:
        RuntimeError: bwrap is missing, or the sandbox itself failed to start.
    """
    limits = limits or SandboxLimits()
    require_bwrap()  # before any pipe is opened
    isolation = current_isolation()  # refuses host root without CAP_SYS_ADMIN, also before
    bpf = no_fork_filter()
    read_fd = _pipe_with(bpf) if bpf is not None else None
    alive_r, alive_w = os.pipe()  # the sandbox inherits alive_w: EOF once every sandboxed process is gone
    fds = (alive_w,) if read_fd is None else (alive_w, read_fd)
    start = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(
                bwrap_argv(limits, timeout_s, read_fd, isolation), stdin=subprocess.PIPE, stdout=out, stderr=err,
                pass_fds=fds, start_new_session=True, env={},  # bwrap's pid 1 inside may be the caller's uid
            )
        except BaseException:
            os.close(alive_r)
            raise
        finally:
            for fd in fds:
                os.close(fd)
        timed_out = _communicate(proc, source.encode(), timeout_s)
        _wait_eof(alive_r, deadline_s=5.0)
        stdout, stderr = _read(out, limits.fsize_mb), _read(err, limits.fsize_mb)
    if not stdout.startswith(_BOOT_TAG) and not timed_out:
        raise RuntimeError(f"the bubblewrap sandbox failed to start (exit {proc.returncode}): "
                           f"{stderr[-500:]}")
    return SandboxResult(proc.returncode, stdout.removeprefix(_BOOT_TAG), stderr, timed_out,
                         time.monotonic() - start)


def _pipe_with(data: bytes) -> int:
    """Return a pipe whose read end yields ``data`` then EOF (the filter is far below the pipe buffer)."""
    r, w = os.pipe()
    os.write(w, data)
    os.close(w)
    return r


def _communicate(proc: subprocess.Popen[bytes], data: bytes, timeout_s: float) -> bool:
    """Feed stdin and wait; on timeout kill the process group. Returns whether it timed out."""
    try:
        proc.communicate(data, timeout=timeout_s)
        return False
    except subprocess.TimeoutExpired:
        return True
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _wait_eof(fd: int, deadline_s: float) -> None:
    """Drain ``fd`` until EOF (all holders exited) or ``deadline_s``; then close it."""
    end = time.monotonic() + deadline_s
    poller = select.poll()  # not select.select: fds above 1023 are fine
    poller.register(fd, select.POLLIN)
    try:
        while (left := end - time.monotonic()) > 0 and poller.poll(left * 1000):
            if not os.read(fd, 4096):
                break
    finally:
        os.close(fd)


def _read(f: Any, cap_mb: int) -> str:
    f.seek(0)
    return f.read(cap_mb << 20).decode("utf-8", "replace")
