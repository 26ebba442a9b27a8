"""The sweep's starting point trains in a child process: a SIGTERM to the sweep is passed on to it, also one
that comes while the child starts (the handler was installed after ``Popen`` returned: the sweep died and the
child went on, orphaned; a review)."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from klear_lab.sweep import parents


@pytest.mark.skipif(not os.path.exists("/bin/sleep"), reason="needs /bin/sleep")
def test_a_sigterm_while_the_child_starts_reaches_it_and_the_handler_is_put_back(monkeypatch):
    real = subprocess.Popen
    before = signal.getsignal(signal.SIGTERM)

    def starting(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # before the child exists
        return real(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", starting)
    code, terminated = parents._run_passing_sigterm(["/bin/sleep", "30"], subprocess.DEVNULL)
    assert (code, terminated) == (-signal.SIGTERM, True)  # passed on once the child was there
    assert signal.getsignal(signal.SIGTERM) == before
    monkeypatch.setattr(subprocess, "Popen", real)
    assert parents._run_passing_sigterm(["/bin/sleep", "0"], subprocess.DEVNULL) == (0, False)
