"""Why a sweep is stopping, as its workers read it: a SIGTERM counts from its handler on."""

from __future__ import annotations

import os
import signal

from sweep_fixtures import write_spec

from klear_lab.errors import INTERRUPTED
from klear_lab.sweep.spec import load_spec
from klear_lab.sweep.terminate import noting_sigterm
from klear_lab.sweep.trial import TERMINATED
from klear_lab.sweep.worker import WorkerContext


def _ctx(tmp_path) -> WorkerContext:
    spec = load_spec(write_spec(tmp_path, seeds=(0,)))
    return WorkerContext(spec=spec, url="sqlite://", frozen_spec=tmp_path / "spec.yaml", workers=1, threads=1)


def test_a_sigterm_is_seen_by_the_workers_before_the_main_thread_sets_stop(tmp_path):
    """Under ``scancel`` the trial gets the same SIGTERM and may end before the main thread's next poll: its
    worker must already read the sweep as stopping, or the trial is judged a plain failure (no retry)."""
    ctx = _ctx(tmp_path)
    with noting_sigterm() as noted:
        ctx.sigterm = noted
        assert ctx.stopping() is None
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs before the next line
        assert not ctx.stop.is_set() and ctx.stopping() == TERMINATED
    assert signal.getsignal(signal.SIGTERM) is not noted  # the handler before it is back


def test_ctrl_c_stops_as_interrupted_and_a_terminated_sweep_as_terminated(tmp_path):
    ctx = _ctx(tmp_path)
    ctx.stop.set()
    assert ctx.stopping() == INTERRUPTED
    ctx.stop_error = TERMINATED
    assert ctx.stopping() == TERMINATED
