"""SIGTERM of ``klear-lab sweep`` (a preemption: ``scancel``, ``docker stop``, Kubernetes) stops its running trials
as ``klear-lab train`` stops on SIGTERM: at a step's end with a checkpoint, the run failed "terminated (SIGTERM)",
the trial failed with its retry queued, exit 143; the same command again continues them from their checkpoints.

Before, the sweep died at once and each trial's pidfd watcher SIGKILLed it: no checkpoint, trials left RUNNING.
Real sweep processes on SQLite; one case trains real ``run_experiment`` SFT trials (the checkpoint is real), the
others use the stand-in runner of ``tests/unit/sweep/sweep_fixtures.py``, wrapped to ignore SIGTERM once.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from optuna.trial import TrialState

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "sweep"))
import sweep_fixtures as fx  # noqa: E402

from klear_lab.resume import checkpoint_log_step  # noqa: E402
from klear_lab.sweep.spec import load_spec  # noqa: E402
from klear_lab.sweep.storage import default_storage_url, open_study  # noqa: E402
from klear_lab.tracking import csv_rows  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TERMINATED = "terminated (SIGTERM)"

# a stand-in runner whose point with a marker ``stubborn-<lr>-<seed>`` notes a SIGTERM (in ``sigterm-<pid>``)
# and goes on as if it had not come: a trial that cannot stop in the grace period
STUBBORN_RUNNER = f"""
import os, signal, sys, time
from pathlib import Path
sys.path.insert(0, {str(Path(fx.__file__).parent)!r})
import sweep_fixtures as fx

def run(cfg, callbacks=None):
    sweep_dir, lr, seed = fx._point(cfg)
    marker = sweep_dir / f"stubborn-{{lr}}-{{seed}}"
    if marker.exists():
        marker.unlink()
        fx._record_call(sweep_dir, lr, seed)
        note = lambda signum, frame: (sweep_dir / f"sigterm-{{os.getpid()}}").write_text("")
        signal.signal(signal.SIGTERM, note)
        (sweep_dir / "slow-started").write_text(str(os.getpid()))
        time.sleep(300)
    return fx.run(cfg, callbacks)
"""


def _study(spec):
    return open_study(spec, default_storage_url(spec), create=False, heartbeat=False)


_wait = fx.wait_sweep


def _wait_for(what, sweep: subprocess.Popen, log: Path, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while not what():
        assert sweep.poll() is None and time.time() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)


def _gone(pid: int) -> bool:
    try:
        return "\nState:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True


def _assert_stopped_and_queued(spec, log: Path, last_line: str | None = None) -> None:
    """The study after the SIGTERM: the stopped trial failed "terminated (SIGTERM)", its retry WAITING."""
    trials = _study(spec).get_trials()
    assert not [t for t in trials if t.state == TrialState.RUNNING], log.read_text()[-3000:]
    (stopped,) = [t for t in trials if t.state == TrialState.FAIL]
    assert stopped.user_attrs["error"] == TERMINATED
    (retry,) = [t for t in trials if t.system_attrs.get("retry_history")]
    assert retry.state == TrialState.WAITING and retry.system_attrs["retry_history"] == [stopped.number]
    text = log.read_text()
    assert f"trial {stopped.number}: stopped, {TERMINATED}; its retry is queued" in text
    assert text.rstrip().splitlines()[-1].startswith(last_line or "terminated (SIGTERM): rerun the same command")


def _real_spec(tmp_path: Path) -> Path:
    """One real SFT trial of 40 steps, no checkpoint before the SIGTERM's (checkpoint_every 1000)."""
    overrides = ["data.sources.0.n_prompts=400", "sft.max_steps=40", "sft.tokens_per_micro_batch=400",
                 "data.eval_sources.0.n_prompts=8", "eval.max_new_tokens=16", "trainer.checkpoint_every=1000",
                 "trainer.log_every_n_steps=1"]
    body = {"name": "sigterm_real", "experiment": str(REPO / "experiments/quickstart/sft.yaml"),
            "overrides": overrides, "axes": {"optim.lr": [0.002]}, "seeds": [0],
            "objective": {"metric": "val/acc", "direction": "maximize"}, "out_dir": str(tmp_path / "out"),
            "heartbeat_interval": 1}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def _train_rows(runs_dir: Path) -> list[int]:
    found = list(runs_dir.glob("*/csv/metrics.csv"))
    return [int(r["step"]) for r in csv_rows(found[0]) if r.get("train/loss")] if found else []


@pytest.mark.parametrize("to", ["sweep", "job"])
def test_sigterm_checkpoints_real_trials_and_the_rerun_continues_them(tmp_path, to):
    """``sweep``: to the sweep process only, as docker stop and Kubernetes send it. ``job``: to every process of
    the job, as scancel does: the preloaded server the trial was forked from got it too, and ended, and with it
    the sweep's news of how the trial ended (it blocks SIGTERM now: ``launcher.sigterm_blocked``)."""
    spec_path = _real_spec(tmp_path)
    spec, log = load_spec(spec_path), tmp_path / "sweep.log"
    cmd = [*fx.sweep_cmd(spec_path), "--workers", "1"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    with log.open("ab") as out:
        sweep = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    _wait_for(lambda: len(_train_rows(spec.runs_dir)) >= 3, sweep, log)
    if to == "sweep":
        os.kill(sweep.pid, signal.SIGTERM)
    else:
        os.killpg(sweep.pid, signal.SIGTERM)
    assert _wait(sweep, 120, log) == 143, log.read_text()[-3000:]
    (run_dir,) = [p for p in spec.runs_dir.iterdir() if not p.name.startswith(".")]
    record = json.loads((run_dir / "run.json").read_text())
    assert (record["status"], record["error"]) == ("failed", TERMINATED)
    logged = _train_rows(spec.runs_dir)
    assert checkpoint_log_step(run_dir / "checkpoints" / "last.ckpt") >= logged[-1] >= 2  # at the last step
    # scancel's SIGTERM reaches the trial itself too: it may checkpoint and end before the sweep counts it
    told = "[01]" if to == "job" else "1"
    assert re.search(rf"SIGTERM: no new trials; {told} running trial\(s\) told to stop", log.read_text())
    _assert_stopped_and_queued(spec, log)
    if to == "job":  # the rerun is the same as after a SIGTERM to the sweep alone
        return

    with log.open("ab") as out:
        again = subprocess.run(cmd, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=600)
    assert again.returncode == 0, log.read_text()[-3000:]
    assert f"resuming {run_dir}" in log.read_text()
    trials = _study(spec).get_trials()
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE"]
    assert trials[1].user_attrs["run_dir"] == str(run_dir) and list(spec.runs_dir.iterdir()) == [run_dir]
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "completed" and record["attempts"] == 2
    assert _train_rows(spec.runs_dir) == list(range(40))  # continued from the checkpoint: each step once


def _stubborn_sweep(tmp_path: Path, trial_start: str, grace: str) -> tuple[object, Path, subprocess.Popen, int]:
    """A 3-point stand-in sweep (1 worker) whose first trial ignores SIGTERM; started, and its trial's pid."""
    runner = tmp_path / "stubborn_runner.py"
    runner.write_text(STUBBORN_RUNNER)
    spec_path = fx.write_spec(tmp_path, name="stubborn", trial_start=trial_start, runner=f"{runner}:run")
    spec, log = load_spec(spec_path), tmp_path / "sweep.log"
    spec.sweep_dir.mkdir(parents=True)
    (spec.sweep_dir / "stubborn-0.001-0").write_text("")
    os.environ[GRACE] = grace  # (fx.start_sweep passes the environment on)
    try:
        sweep = fx.start_sweep(spec_path, "--workers", "1", log=log)
    finally:
        del os.environ[GRACE]
    started = spec.sweep_dir / "slow-started"
    _wait_for(started.exists, sweep, log, 240)
    return spec, log, sweep, int(started.read_text())


GRACE = "KLEAR_SWEEP_TERM_GRACE_S"


@pytest.mark.parametrize(("trial_start", "escalation"), [("preloaded", "grace"), ("fresh", "second"),
                                                         ("preloaded", "ctrl-c")])
def test_a_trial_that_does_not_stop_is_killed_after_the_grace_or_a_second_sigterm(tmp_path, trial_start,
                                                                                  escalation):
    spec, log, sweep, trial_pid = _stubborn_sweep(tmp_path, trial_start, "3" if escalation == "grace" else "300")
    os.kill(sweep.pid, signal.SIGTERM)
    _wait_for((spec.sweep_dir / f"sigterm-{trial_pid}").exists, sweep, log, 30)  # forwarded as SIGTERM
    assert not _gone(trial_pid)  # not killed: it is given the grace period
    if escalation != "grace":  # a Ctrl-C in the grace ended the sweep with its trials unrecorded (RUNNING)
        _wait_for(lambda: "SIGTERM: no new trials" in log.read_text(), sweep, log, 30)
        os.kill(sweep.pid, signal.SIGTERM if escalation == "second" else signal.SIGINT)
    assert _wait(sweep, 60, log) == (130 if escalation == "ctrl-c" else 143), log.read_text()[-3000:]
    assert _gone(trial_pid)
    if escalation != "ctrl-c":
        why = "a second SIGTERM" if escalation == "second" else f"still running 3s after the SIGTERM ({GRACE})"
        assert f"{why}: trial processes killed" in log.read_text()
    _assert_stopped_and_queued(spec, log, "interrupted: rerun the same command" if escalation == "ctrl-c" else None)
    # the rerun takes the queued retry and completes the grid, each point once
    assert _wait(fx.start_sweep(spec.path, "--workers", "1", log=log), 120, log) == 0, log.read_text()[-3000:]
    complete = [t.user_attrs["point"] for t in _study(spec).get_trials() if t.state == TrialState.COMPLETE]
    assert sorted(complete) == sorted(set(complete)) and len(complete) == 3
    assert [(lr, s) for lr, s, _, _ in fx.invocations(spec.sweep_dir)].count((0.001, 0)) == 2


def test_a_sigterm_while_the_first_trial_starts_leaves_the_study_consistent(tmp_path):
    """SIGTERM as the first trial's (fresh) process starts, before it has trained anything: exit 143, no trial
    RUNNING, its retry queued."""
    spec_path = fx.write_spec(tmp_path, name="early", trial_start="fresh")
    spec, log = load_spec(spec_path), tmp_path / "sweep.log"
    sweep = fx.start_sweep(spec_path, "--workers", "1", log=log)
    _wait_for(lambda: log.is_file() and ": started (log " in log.read_text(), sweep, log, 240)
    os.kill(sweep.pid, signal.SIGTERM)
    assert _wait(sweep, 60, log) == 143, log.read_text()[-3000:]
    _assert_stopped_and_queued(spec, log)
    assert _wait(fx.start_sweep(spec_path, "--workers", "1", log=log), 120, log) == 0, log.read_text()[-3000:]
    complete = [t.user_attrs["point"] for t in _study(spec).get_trials() if t.state == TrialState.COMPLETE]
    assert sorted(complete) == sorted(set(complete)) and len(complete) == 3
