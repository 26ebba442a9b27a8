"""Sweep machinery end to end on SQLite: real sweep processes, trial subprocesses and Optuna.

Trials use the fast stand-in runner from ``tests/unit/sweep/sweep_fixtures.py`` (same job
files, subprocesses and storage as ``run_experiment`` trials; only the training is faked).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest
from optuna.trial import TrialState

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "sweep"))
import sweep_fixtures as fx  # noqa: E402

from klear_lab.run_list import list_runs  # noqa: E402
from klear_lab.sweep.run_status import RUN_DIR_ATTR  # noqa: E402
from klear_lab.sweep.spec import load_spec  # noqa: E402
from klear_lab.sweep.storage import default_storage_url, open_study  # noqa: E402


def _study(spec_path: Path):
    spec = load_spec(spec_path)
    return spec, open_study(spec, default_storage_url(spec), create=False, heartbeat=False)


def _complete_per_point(study) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in study.get_trials():
        if t.state.name == "COMPLETE":
            out[t.user_attrs["point"]] = out.get(t.user_attrs["point"], 0) + 1
    return out


_wait = fx.wait_sweep


def _hung_trial_pid(spec, sweep: subprocess.Popen, log: Path) -> int:
    """Wait until the trial marked ``slow-*`` announced itself; its pid."""
    started = spec.sweep_dir / "slow-started"
    deadline = time.time() + 240
    while not started.exists():
        assert sweep.poll() is None and time.time() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)
    return int(started.read_text())


def _wait_gone(pid: int, message: str) -> None:
    deadline = time.time() + 10
    while not _gone(pid):
        assert time.time() < deadline, message
        time.sleep(0.1)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in state


def test_two_sweep_processes_run_each_point_once(tmp_path):
    spec_path = fx.write_spec(tmp_path, lrs=(0.001, 0.002, 0.003, 0.004), seeds=(0, 1))
    log = tmp_path / "sweep.log"
    a = fx.start_sweep(spec_path, "--workers", "2", sleep=1.0, log=log)
    b = fx.start_sweep(spec_path, "--workers", "1", sleep=1.0, log=log)
    assert _wait(a, 300, log) == 0 and _wait(b, 300, log) == 0, log.read_text()[-3000:]
    spec, study = _study(spec_path)
    trials = study.get_trials()
    assert len(trials) == 8 and all(t.state.name == "COMPLETE" for t in trials)
    assert sorted(_complete_per_point(study).values()) == [1] * 8
    calls = fx.invocations(spec.sweep_dir)
    assert len(calls) == 8 and len({(lr, s) for lr, s, _, _ in calls}) == 8
    assert {sweep_pid for *_, sweep_pid in calls} == {a.pid, b.pid}  # both processes took work
    cores = len(os.sched_getaffinity(0))
    by_trial = {t.user_attrs["run_dir"]: t.user_attrs["metrics"]["perf/threads"] for t in trials}
    assert set(by_trial.values()) <= {float(max(1, cores // 2)), float(cores)}
    table = pd.read_csv(spec.sweep_dir / "compare" / "table.csv")
    assert table["arm"].tolist() == ["lr=0.001", "lr=0.002", "lr=0.003", "lr=0.004"]
    assert table.loc[table["best"], "arm"].tolist() == ["lr=0.004"] and table["n"].tolist() == [2] * 4
    assert (spec.sweep_dir / "compare" / "curves.png").is_file()
    assert (spec.sweep_dir / "compare" / "table.md").is_file()


def test_adding_seeds_and_an_arm_reruns_nothing(tmp_path):
    spec_path = fx.write_spec(tmp_path, name="grow", lrs=(0.001, 0.002), seeds=(0,))
    log = tmp_path / "sweep.log"
    assert _wait(fx.start_sweep(spec_path, "--workers", "2", log=log), 300, log) == 0, log.read_text()[-3000:]
    fx.write_spec(tmp_path, name="grow", lrs=(0.001, 0.002, 0.003), seeds=(0, 1))  # the same file, edited
    assert _wait(fx.start_sweep(spec_path, "--workers", "2", log=log), 300, log) == 0, log.read_text()[-3000:]
    assert "continuing in study 'grow@v2', a copy of 'grow' with its 2 trials" in log.read_text()
    spec, study = _study(spec_path)
    assert study.study_name == "grow@v2" and sorted(_complete_per_point(study).values()) == [1] * 6
    calls = [(lr, s) for lr, s, _, _ in fx.invocations(spec.sweep_dir)]
    assert sorted(calls) == [(lr, s) for lr in (0.001, 0.002, 0.003) for s in (0, 1)]  # each point ran once
    table = pd.read_csv(spec.sweep_dir / "compare" / "table.csv")
    assert table["arm"].tolist() == ["lr=0.001", "lr=0.002", "lr=0.003"] and table["n"].tolist() == [2, 2, 2]


@pytest.mark.parametrize("trial_start", ["preloaded", "fresh"])
def test_kill_9_mid_trial_then_resume(tmp_path, trial_start):
    spec_path = fx.write_spec(tmp_path, name="killme", trial_start=trial_start)
    spec = load_spec(spec_path)
    spec.sweep_dir.mkdir(parents=True)
    (spec.sweep_dir / "slow-0.002-0").write_text("")  # the second point hangs once
    log = tmp_path / "sweep.log"
    first = fx.start_sweep(spec_path, "--workers", "1", log=log)
    trial_pid = _hung_trial_pid(spec, first, log)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    # its pidfd watcher: the trial dies with the sweep process
    _wait_gone(trial_pid, "orphaned trial process survived its worker")
    _, study = _study(spec_path)
    assert [t.state.name for t in study.get_trials()] == ["COMPLETE", "RUNNING", "WAITING"]
    killed_run = _killed_before_its_checkpoint(spec, study, trial_pid)

    second = fx.start_sweep(spec_path, "--workers", "1", log=log)
    assert _wait(second, 300, log) == 0, log.read_text()[-3000:]
    _, study = _study(spec_path)
    # its retry started over in a run of its own: the killed run is no longer "stopped", to continue
    (row,) = list_runs([spec.runs_dir])
    retry_run = study.get_trials()[-1].user_attrs["run_dir"]
    assert row.run_dir == str(killed_run) and row.status == "failed", log.read_text()[-3000:]
    assert row.note == f"superseded: its trial's retry started over in {retry_run} (trial 3)"  # nothing to rerun
    states = [t.state.name for t in study.get_trials()]
    assert states.count("COMPLETE") == 3 and states.count("FAIL") == 1 and len(states) == 4
    assert sorted(_complete_per_point(study).values()) == [1, 1, 1]
    retried = [t for t in study.get_trials() if t.system_attrs.get("failed_trial") is not None]
    assert len(retried) == 1 and retried[0].system_attrs["failed_trial"] == 1
    calls = [(lr, s) for lr, s, _, _ in fx.invocations(spec.sweep_dir)]
    assert calls.count((0.001, 0)) == 1  # completed before the kill: not rerun
    assert calls.count((0.002, 0)) == 2  # killed, then retried
    assert calls.count((0.003, 0)) == 1


def _killed_before_its_checkpoint(spec, study, trial_pid: int) -> Path:
    """The run of the RUNNING trial as ``run_experiment`` leaves it when killed before its first checkpoint
    (the stand-in runner writes none): run.json says running, its process is gone, the trial names it."""
    run_dir = spec.runs_dir / "killed"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"status": "running", "pid": trial_pid, "pid_start": 1,
                                                  "host": socket.gethostname(), "tags": ["kind:sft"]}))
    (running,) = study.get_trials(states=(TrialState.RUNNING,))
    study._storage.set_trial_user_attr(running._trial_id, RUN_DIR_ATTR, str(run_dir))
    return run_dir


def test_pruned_trials_and_compare_command(tmp_path):
    spec_path = fx.write_spec(tmp_path, name="prune", lrs=(0.003, 0.001), pruner="median",
                              runner=fx.PRUNABLE_RUNNER)
    log = tmp_path / "sweep.log"
    assert _wait(fx.start_sweep(spec_path, "--workers", "1", log=log), 300, log) == 0, log.read_text()[-3000:]
    spec, study = _study(spec_path)
    assert [t.state.name for t in study.get_trials()] == ["COMPLETE", "PRUNED"]
    assert list(study.get_trials()[1].intermediate_values) == [10]
    out = subprocess.run([sys.executable, "-m", "klear_lab.cli_sweep", "compare", str(spec.sweep_dir)],
                         cwd=fx.REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "lr=0.003" in out.stdout and "1/0" in out.stdout
    table = pd.read_csv(spec.sweep_dir / "compare" / "table.csv")
    assert table["pruned"].tolist() == [0, 1] and table["n"].tolist() == [1, 0]


def test_a_trial_killed_by_the_kernel_fails_alone_and_reruns(tmp_path):
    spec_path = fx.write_spec(tmp_path, name="oom")
    spec = load_spec(spec_path)
    spec.sweep_dir.mkdir(parents=True)
    (spec.sweep_dir / "die-0.002-0").write_text("")  # the second point's process is SIGKILLed once
    log = tmp_path / "sweep.log"
    assert _wait(fx.start_sweep(spec_path, "--workers", "2", log=log), 300, log) == 1, log.read_text()[-3000:]
    _, study = _study(spec_path)
    states = {t.params["optim.lr"]: t for t in study.get_trials()}
    assert {lr: t.state.name for lr, t in states.items()} == {0.001: "COMPLETE", 0.002: "FAIL", 0.003: "COMPLETE"}
    assert "exited with code -9" in states[0.002].user_attrs["error"]
    assert _wait(fx.start_sweep(spec_path, "--workers", "2", log=log), 300, log) == 0, log.read_text()[-3000:]
    _, study = _study(spec_path)
    assert sorted(_complete_per_point(study).values()) == [1, 1, 1]
    assert [(lr, s) for lr, s, _, _ in fx.invocations(spec.sweep_dir)].count((0.002, 0)) == 2


@pytest.mark.parametrize("trial_start", ["preloaded", "fresh"])
def test_ctrl_c_stops_the_sweep_and_its_trial(tmp_path, trial_start):
    spec_path = fx.write_spec(tmp_path, name="interrupt", trial_start=trial_start)
    spec = load_spec(spec_path)
    spec.sweep_dir.mkdir(parents=True)
    (spec.sweep_dir / "slow-0.001-0").write_text("")  # the first trial hangs
    log = tmp_path / "sweep.log"
    sweep = fx.start_sweep(spec_path, "--workers", "1", log=log)
    trial_pid = _hung_trial_pid(spec, sweep, log)
    os.kill(sweep.pid, signal.SIGINT)  # to the sweep process only, not its process group
    assert _wait(sweep, 30, log) == 130, log.read_text()[-3000:]
    assert "rerun the same command to resume" in log.read_text()
    _wait_gone(trial_pid, "the interrupted sweep left its trial running")
    _, study = _study(spec_path)
    killed, retry = study.get_trials()[0], study.get_trials()[-1]
    assert killed.state.name == "FAIL" and killed.user_attrs["error"] == "interrupted (Ctrl-C)"
    assert retry.state.name == "WAITING" and retry.system_attrs["retry_history"] == [killed.number]
    assert "error" not in retry.user_attrs and retry.user_attrs["point"] == killed.user_attrs["point"]
    # the rerun takes the queued retry at once (no wait for the killed trial to look stale)
    assert _wait(fx.start_sweep(spec_path, "--workers", "1", log=log), 120, log) == 0, log.read_text()[-3000:]
    _, study = _study(spec_path)
    assert sorted(_complete_per_point(study).values()) == [1, 1, 1]
    assert [(lr, s) for lr, s, _, _ in fx.invocations(spec.sweep_dir)].count((0.001, 0)) == 2


def test_a_random_sweep_whose_trials_all_fail_stops_and_exits_1(tmp_path):
    """Trials that all crashed were replaced without end: tpe/random asked for new ones."""
    spec_path = fx.write_spec(tmp_path, name="nolog", sampler="random", n_trials=30,
                              axes={"optim.lr": {"low": 0.001, "high": 0.003}}, runner=fx.FAILING_RUNNER)
    log = tmp_path / "sweep.log"
    assert _wait(fx.start_sweep(spec_path, "--workers", "2", log=log), 300, log) == 1, log.read_text()[-3000:]
    _, study = _study(spec_path)
    states = [t.state.name for t in study.get_trials()]
    assert set(states) == {"FAIL"} and 5 <= len(states) <= 6  # 5 in a row, and one the other worker had started
    text = log.read_text()
    assert "5 trials failed in a row: no new trials are asked for" in text
    assert "0 of n_trials=30 trials finished" in text


def test_a_run_without_the_objective_stops_the_sweep(tmp_path):
    """The first run that finished without the objective failed, and every other trial trained all the same
    (they lack it too); the sweep ended with exit 1 and a suggestion to rerun."""
    spec_path = fx.write_spec(tmp_path, name="noobj", objective={"metric": "val/not_logged", "direction": "maximize"})
    log = tmp_path / "sweep.log"
    assert _wait(fx.start_sweep(spec_path, "--workers", "1", log=log), 300, log) == 2, log.read_text()[-3000:]
    spec, study = _study(spec_path)
    assert sorted(t.state.name for t in study.get_trials()) == ["FAIL", "WAITING", "WAITING"]
    assert len(fx.invocations(spec.sweep_dir)) == 1
    text = log.read_text()
    assert (f"klear-lab: error: {spec_path}: objective.metric: trial 0: objective 'val/not_logged' missing from "
            "the run's metrics") in text
    assert "no further trial was started" in text and "rerun the same command" not in text


@pytest.mark.parametrize(("runner", "error"), [(fx.REFUSING_RUNNER, "ConfigError: optim.lr="),
                                               (fx.DIVERGING_RUNNER, "DivergedError: training diverged")])
def test_trials_that_refuse_their_config_or_diverge_are_not_sent_to_a_rerun(tmp_path, runner, error):
    """A config error fails the same way on every rerun: the end of the sweep said to rerun to retry them.
    So does a diverged run (same config, same seed): the sweep says to fix the config first."""
    spec_path = fx.write_spec(tmp_path, name="refused", runner=runner)
    log = tmp_path / "sweep.log"
    assert _wait(fx.start_sweep(spec_path, "--workers", "2", log=log), 300, log) == 1, log.read_text()[-3000:]
    text = log.read_text()
    assert ("fix the config first: 3 trial(s) failed on a config or data error, or diverged: a rerun would likely "
            "repeat") in text
    assert error in text and "rerun the same command" not in text


def test_a_trial_the_hub_failed_is_retried_in_the_same_sweep(tmp_path):
    """A download the hub could not serve was a config error: never retried, and the sweep said to fix the
    config. Now the point is retried, up to max_retry times, after retry_delay_s doubling per retry."""
    spec_path = fx.write_spec(tmp_path, name="flaky", runner=fx.FLAKY_RUNNER, max_retry=2, retry_delay_s=1)
    spec = load_spec(spec_path)
    spec.sweep_dir.mkdir(parents=True)
    (spec.sweep_dir / "down-0.002-0").write_text("2")  # fails twice, then the hub answers
    (spec.sweep_dir / "down-0.003-0").write_text("3")  # fails more often than max_retry allows
    log = tmp_path / "sweep.log"
    assert _wait(fx.start_sweep(spec_path, "--workers", "1", log=log), 300, log) == 1, log.read_text()[-3000:]
    _, study = _study(spec_path)
    by_lr: dict[float, list[str]] = {}
    for t in sorted(study.get_trials(), key=lambda t: t.number):
        by_lr.setdefault(t.params["optim.lr"], []).append(t.state.name)
    assert by_lr == {0.001: ["COMPLETE"], 0.002: ["FAIL", "FAIL", "COMPLETE"], 0.003: ["FAIL", "FAIL", "FAIL"]}
    text = log.read_text()
    assert text.count("a download failed on the network; retrying it in 1 s") == 2
    assert text.count("a download failed on the network; retrying it in 2 s") == 2
    calls = [t for t in study.get_trials() if t.params["optim.lr"] == 0.002]
    assert calls[1].datetime_start - calls[0].datetime_complete >= timedelta(seconds=1)  # held back
    assert calls[2].datetime_start - calls[1].datetime_complete >= timedelta(seconds=2)
    assert "a download failed on the network; no retry left: rerun the sweep once the hub answers" in text
    assert "fix the config first" not in text and "rerun the same command to retry them" in text
    assert (spec.sweep_dir / "down-0.003-0").read_text() == "0"
    assert _wait(fx.start_sweep(spec_path, "--workers", "1", log=log), 300, log) == 0, log.read_text()[-3000:]
