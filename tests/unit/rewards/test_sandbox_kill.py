"""The host's own kill of a sandbox: a pidfd for the sandbox's pid 1, from bwrap's ``--info-fd``."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys

import pytest

from klear_lab.rewards import sandbox
from klear_lab.rewards.isolation import current_isolation, run_uid
from klear_lab.rewards.sandbox_io import end_namespace, namespace_init

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap is Linux-only")

SLEEPER = "import sys, time\nprint('up', flush=True)\ntime.sleep(60)\n"


def _closed_within(fd: int, seconds: float) -> bool:
    """Whether every holder of the pipe's write end is gone (EOF) within ``seconds``."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(seconds * 1000)) and not os.read(fd, 1)


def test_the_host_kills_the_sandbox_while_bwrap_itself_cannot():
    """bwrap stopped (so neither it nor its death signal ends the program): the pidfd kill still ends
    every sandboxed process."""
    isolation = current_isolation()
    alive_r, alive_w = os.pipe()
    info_r, info_w = os.pipe()
    with run_uid(isolation.own_uids) as uid:
        argv = sandbox.bwrap_argv(sandbox.SandboxLimits(), 60, None, isolation, uid, info_w)
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                pass_fds=(alive_w, info_w), env={}, start_new_session=True)
        os.close(alive_w)
        os.close(info_w)
        try:
            init = namespace_init(info_r, 30, proc.pid)
            assert init is not None
            proc.stdin.write(SLEEPER.encode())
            proc.stdin.close()
            assert proc.stdout.readline() == sandbox._BOOT_TAG.encode()
            assert proc.stdout.readline() == b"up\n"
            proc.send_signal(signal.SIGSTOP)
            assert not _closed_within(alive_r, 0.5)  # stopped bwrap: the program sleeps on
            end_namespace(init)
            assert _closed_within(alive_r, 10)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
            os.close(alive_r)
            proc.stdout.close()
            proc.stderr.close()


def test_no_pidfd_where_bwrap_wrote_nothing():
    """bwrap that fails before it makes the sandbox closes the info pipe empty: no pidfd, at once."""
    info_r, info_w = os.pipe()
    proc = subprocess.Popen([sandbox.require_bwrap(), "--no-such-option", "--info-fd", str(info_w), "true"],
                            pass_fds=(info_w,), stderr=subprocess.DEVNULL)
    os.close(info_w)
    assert namespace_init(info_r, 10, proc.pid) is None
    assert proc.wait(10) != 0
    end_namespace(None)  # nothing to kill


def test_garbage_on_the_info_pipe_gives_no_pidfd():
    info_r, info_w = os.pipe()
    os.write(info_w, b'{"child-pid": "1; rm -rf /"}')
    os.close(info_w)
    assert namespace_init(info_r, 1, os.getpid()) is None


def test_a_run_ends_its_sandbox_and_leaves_no_pidfd_open():
    """Each run closes its pidfd: three short runs leave this process's open files as they were."""
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(3):
        assert sandbox.run_python("print(1)").stdout == "1\n"
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_pid_that_is_not_bwraps_child_gets_no_pidfd():
    """bwrap reaps its child as soon as it exits: by the time the host opens the pid, it may name another
    process, which the host's kill must never reach."""
    other = subprocess.Popen(["sleep", "30"])  # a child of this process, not of "bwrap"
    try:
        for bwrap_pid, expected in ((os.getppid(), False), (os.getpid(), True)):
            info_r, info_w = os.pipe()
            os.write(info_w, f'{{"child-pid": {other.pid}}}'.encode())
            os.close(info_w)
            pidfd = namespace_init(info_r, 1, bwrap_pid)
            assert (pidfd is not None) == expected
            if pidfd is not None:
                os.close(pidfd)
        assert other.poll() is None  # nothing was killed
    finally:
        other.kill()
        other.wait()
