"""What the sweep says when a signal reaches it while its starting point trains (``parents._train``), with a small
child process in place of the training: a SIGTERM after which the child finished anyway (it exits 0 either way:
Lightning's ``SIGTERMException`` is a bare ``SystemExit``) is not told as "continues from its checkpoint", and a
Ctrl-C says to rerun the same command, as the sweep's other Ctrl-C lines do."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from klear_lab.sweep import parents
from klear_lab.sweep.terminate import SweepTerminated

CHILD = """
import os, pathlib, signal, sys, time
done, finishes, ready = pathlib.Path(sys.argv[1]), sys.argv[2] == "1", pathlib.Path(sys.argv[3])

def on_sigterm(signum, frame):
    if finishes:  # the step was the last one: the run completes, then exits as Lightning's SIGTERMException does
        done.write_text("completed")
    sys.exit()

signal.signal(signal.SIGTERM, on_sigterm)
ready.write_text(str(os.getpid()))
time.sleep(60)
"""


@pytest.fixture
def sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A sweep whose starting point trains in :data:`CHILD` and counts as completed once it wrote ``done``."""
    done, ready = tmp_path / "done", tmp_path / "ready"
    spec = SimpleNamespace(name="quick", sweep_dir=tmp_path / "sweep", path=tmp_path / "spec.yaml",
                           experiment=tmp_path / "rl.yaml")
    monkeypatch.setattr(parents, "trained_start", lambda cfg: (done if done.exists() else None, None))
    checkpoint = tmp_path / "checkpoint"  # the stopped run a rerun continues, once made
    monkeypatch.setattr(parents, "resumable_start", lambda cfg: checkpoint if checkpoint.exists() else None)

    def start(finishes: bool) -> None:
        monkeypatch.setattr(parents, "_start_command", lambda spec, threads: [
            sys.executable, "-c", CHILD, str(done), "1" if finishes else "0", str(ready)])

    return SimpleNamespace(spec=spec, ready=ready, start=start, log=spec.sweep_dir / "parent.log",
                           checkpoint=checkpoint)


def _signal_once_ready(ready: Path, signum: int) -> threading.Thread:
    """Send ``signum`` to this process once the child runs (the sweep's handler is in by then)."""

    def send() -> None:
        deadline = time.time() + 30
        while not ready.exists() and time.time() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signum)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("finishes", [True, False])
def test_after_a_sigterm_the_sweep_says_whether_its_starting_point_completed(sweep, finishes):
    sweep.start(finishes)
    sweep.checkpoint.write_text("step 50")
    lines: list[str] = []
    sender = _signal_once_ready(sweep.ready, signal.SIGTERM)
    with pytest.raises(SweepTerminated) as stopped:
        parents._train(sweep.spec, {}, 1, lines.append)
    sender.join()
    if finishes:
        assert str(stopped.value) == "the starting point completed: the rerun uses it"
        assert f"starting point completed although a SIGTERM came ({sweep.ready.parent / 'done'}" in lines[-1]
        assert not any("stopped by SIGTERM" in line for line in lines), lines
    else:
        assert str(stopped.value) == "the starting point continues from its checkpoint"
        assert lines[-1] == f"sweep quick: starting point stopped by SIGTERM (exit 0; see {sweep.log})"


def test_a_ctrl_c_while_the_starting_point_trains_says_to_rerun_the_same_command(sweep):
    sweep.start(finishes=False)
    lines: list[str] = []
    sender = _signal_once_ready(sweep.ready, signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        parents._train(sweep.spec, {}, 1, lines.append)
    sender.join()
    assert lines[-1].startswith(f"sweep quick: starting point interrupted (Ctrl-C; see {sweep.log}): rerun the same "
                                "command to resume"), lines
    with pytest.raises(ProcessLookupError):  # killed and waited for, as before
        os.kill(int(sweep.ready.read_text()), 0)


def test_a_sigterm_before_the_starting_points_first_checkpoint_says_the_rerun_trains_it(sweep):
    """Still waiting on another sweep's lock, or reading its data: "continues from its checkpoint" was untrue."""
    sweep.start(finishes=False)
    lines: list[str] = []
    sender = _signal_once_ready(sweep.ready, signal.SIGTERM)
    with pytest.raises(SweepTerminated) as stopped:
        parents._train(sweep.spec, {}, 1, lines.append)
    sender.join()
    assert str(stopped.value).startswith("the starting point had no checkpoint yet: the rerun trains it from the "
                                         "start")
