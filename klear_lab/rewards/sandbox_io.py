"""The host's side of the pipes to one sandboxed process (registers nothing).

The seccomp filter's pipe, the exchange over stdin/stdout/stderr (feeding the program, keeping each
output up to its cap, the wall-clock, start and silence limits, the stdout lines ``progress`` judges),
the host's own kill of the sandbox's pid namespace (through a pidfd for its pid 1), and the wait for every
sandboxed process to be gone: what :func:`klear_lab.rewards.sandbox.run_python` uses.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import selectors
import signal
import subprocess
import time
from collections.abc import Callable


def pipe_with(data: bytes) -> int:
    """Return a pipe whose read end yields ``data`` then EOF (the filter is far below the pipe buffer)."""
    r, w = os.pipe()
    os.write(w, data)
    os.close(w)
    return r


def exchange(proc: subprocess.Popen[bytes], data: bytes, timeout_s: float, start_limit_s: float, cap: int,
              idle_s: float | None = None, progress: Callable[[bytes], bool | None] | None = None,
              ) -> tuple[bytes, bytes, bool, bool, list[float], str | None, float | None]:
    """Feed ``data`` on stdin and read stdout and stderr, each kept up to ``cap`` bytes (the rest of stderr is
    read and dropped), until the process exits, ``timeout_s`` passes from when it is up with the whole
    program (``start_limit_s``: :data:`klear_lab.rewards.sandbox.START_LIMIT_S`, from the start while it is
    not), stdout reaches ``cap`` (the program is ended there: what it writes next would be dropped, and
    reading it costs the host a core), a line ``progress`` refuses (None) comes, or stdout stays silent for
    ``idle_s`` (only lines ``progress`` accepts count, once the program has started); then kill its process
    group.

    Returns:
        (stdout, stderr, whether it timed out, whether that was for silence, when each line ``progress``
        accepted came: ``time.monotonic()`` values, what ended it early: ``cap``, ``foul`` or None, when it
        was up with the whole program: the silence clock's start, or None).
    """
    deadline = time.monotonic() + start_limit_s  # until it is up with the whole program; then ready + timeout_s
    heard: float | None = None  # stdout's last output, once the sandbox is up and has the whole program
    booted = stalled = False
    kept = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    sel = selectors.DefaultSelector()
    for f in kept:
        sel.register(f, selectors.EVENT_READ)
    sel.register(proc.stdin, selectors.EVENT_WRITE)
    sent, partial, line_at, ended, ready = 0, bytearray(), [], None, None
    try:
        while sel.get_map() and not ended and (left := deadline - time.monotonic()) > 0:
            quiet = left if idle_s is None or heard is None else heard + idle_s - time.monotonic()
            if quiet <= 0:
                stalled = True
                break
            for key, _ in sel.select(min(left, quiet)):
                f = key.fileobj
                if f is proc.stdin:  # PIPE_BUF at a time: a write POLLOUT allows never blocks
                    try:
                        sent += os.write(f.fileno(), data[sent:sent + select.PIPE_BUF])
                    except BrokenPipeError:
                        sent = len(data)
                    if sent >= len(data):
                        sel.unregister(f)
                        f.close()
                        heard = ready = time.monotonic() if booted else None  # a large program: idle from here
                        deadline = deadline if ready is None else ready + timeout_s
                elif chunk := os.read(f.fileno(), 1 << 16):
                    room = chunk[:max(cap - len(kept[f]), 0)]
                    kept[f] += room
                    if f is proc.stdout:
                        ended = "cap" if len(kept[f]) >= cap else None  # nothing more is kept: reading on
                        now = time.monotonic()
                        moved, foul = _progressed(partial, chunk, progress) if progress is not None else (0, False)
                        ended = "foul" if foul else ended  # would cost host CPU for nothing
                        line_at += [now] * moved
                        alive = progress is None or moved > 0 or not booted
                        booted = True
                        if alive:
                            heard = now if sent >= len(data) else None
                            if ready is None and heard is not None:
                                ready, deadline = heard, heard + timeout_s
                else:
                    sel.unregister(f)
        timed_out = bool(sel.get_map()) and not ended  # the deadline came first
        if not timed_out and not ended:  # both pipes closed: the program is exiting
            proc.wait(max(deadline - time.monotonic(), 0.01))
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        sel.close()
        stop_bwrap(proc)
    return bytes(kept[proc.stdout]), bytes(kept[proc.stderr]), timed_out, stalled, line_at, ended, ready


def stop_bwrap(proc: subprocess.Popen[bytes]) -> None:
    """Kill bwrap's process group if it still runs, reap it, and close the pipes to it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for f in (proc.stdin, proc.stdout, proc.stderr):
        f.close()


LINE_HEAD = 256
"""Bytes of each stdout line that ``progress`` sees: its head (a result line's index comes first)."""


def _progressed(partial: bytearray, chunk: bytes, progress: Callable[[bytes], bool | None]) -> tuple[int, bool]:
    """How many whole lines that ``chunk`` completes pass ``progress`` (on the line's first
    :data:`LINE_HEAD` bytes), and whether one was refused (``progress`` returned None; the lines after it
    are not offered). ``partial`` keeps the unfinished line's head. Only lines that start like a JSON
    object are offered (in order: ``progress`` may keep count), so a flood of blank lines costs no Python
    call per line."""
    *lines, rest = (bytes(partial) + chunk).split(b"\n")
    partial[:] = rest[:LINE_HEAD]
    moved = 0
    for line in lines:
        if line.startswith(b'{"'):
            verdict = progress(line[:LINE_HEAD])
            if verdict is None:
                return moved, True
            moved += bool(verdict)
    return moved, False


def read_to_eof(fd: int, deadline_s: float) -> bytes:
    """Read ``fd`` until EOF (all holders of its write end closed it or exited) or ``deadline_s``; then close
    it. Returns what was read."""
    end = time.monotonic() + deadline_s
    data = bytearray()
    poller = select.poll()  # not select.select: fds above 1023 are fine
    poller.register(fd, select.POLLIN)
    try:
        while (left := end - time.monotonic()) > 0 and poller.poll(left * 1000):
            if not (chunk := os.read(fd, 4096)):
                break
            data += chunk
    finally:
        os.close(fd)
    return bytes(data)


def namespace_init(info_fd: int, deadline_s: float, bwrap_pid: int) -> int | None:
    """A pidfd for the sandbox's pid 1, named by bwrap's ``--info-fd`` JSON (``child-pid``), which bwrap writes
    and closes as soon as it has made the sandbox; None where it wrote none within ``deadline_s`` (it failed
    first), the kernel has no pidfds, or the pid no longer names bwrap's child. Closes ``info_fd``.

    bwrap reaps its child as soon as it exits, so by the time the pid is opened it may name another process.
    Opened, it is checked to be a child of ``bwrap_pid``: bwrap makes one child only, so that is the sandbox's
    pid 1, and the pidfd keeps naming that process (a signal through it never reaches a reused pid).
    """
    try:
        pid = json.loads(read_to_eof(info_fd, deadline_s))["child-pid"]
        pidfd = os.pidfd_open(pid)
    except (ValueError, KeyError, TypeError, OSError):  # nothing written; the process already gone; no pidfds
        return None
    try:
        with open(f"/proc/{pid}/stat") as stat:
            parent = int(stat.read().rsplit(")", 1)[1].split()[1])  # after "pid (comm)": state, ppid
    except (OSError, ValueError, IndexError):
        parent = None
    if parent != bwrap_pid:
        os.close(pidfd)
        return None
    return pidfd


def end_namespace(pidfd: int | None) -> None:
    """SIGKILL the sandbox's pid 1 (the kernel then kills every process in its pid namespace) and close the
    pidfd. The host's own kill, beside the parent-death signal that bwrap's death sends the program: that
    signal is the program's to keep (seccomp refuses ``prctl(PR_SET_PDEATHSIG)``), this one is the host's."""
    if pidfd is None:
        return
    try:
        with contextlib.suppress(ProcessLookupError):  # it already exited
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    finally:
        os.close(pidfd)
