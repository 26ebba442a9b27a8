"""A sweep of real ``run_experiment`` trials (tiny quickstart SFT), both ways of starting a trial.

``preloaded`` forks each trial from the forkserver that imported torch & co. once; ``fresh`` starts
a new interpreter. Either way a trial must be what a standalone run is: its own process, the
worker's share of the threads, its own log file, its own W&B run in the sweep's group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from klear_lab import wandb_file
from klear_lab.hardware import auto_threads
from klear_lab.sweep.spec import load_spec
from klear_lab.sweep.storage import default_storage_url, open_study

REPO = Path(__file__).resolve().parents[2]


def _spec(tmp_path: Path, trial_start: str) -> Path:
    overrides = ["data.sources.0.n_prompts=120", "sft.max_steps=3", "data.eval_sources.0.n_prompts=8",
                 "eval.max_new_tokens=16", "trainer.checkpoint=false", "sft.tokens_per_micro_batch=1000"]
    body = {"name": f"real_{trial_start}", "experiment": str(REPO / "experiments/quickstart/sft.yaml"),
            "overrides": overrides, "axes": {"optim.lr": [0.001, 0.002]}, "seeds": [0],
            "objective": {"metric": "val/acc", "direction": "maximize"}, "metrics": ["train/loss"],
            "out_dir": str(tmp_path / "out"), "heartbeat_interval": 5, "trial_start": trial_start}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


@pytest.mark.parametrize("trial_start", ["preloaded", "fresh"])
def test_real_trials_run_like_standalone_runs(tmp_path, trial_start):
    spec_path = _spec(tmp_path, trial_start)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    out = subprocess.run([sys.executable, "-m", "klear_lab.cli_sweep", "sweep", str(spec_path), "--workers", "2"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    spec = load_spec(spec_path)
    trials = open_study(spec, default_storage_url(spec), create=False, heartbeat=False).get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    threads = auto_threads(2)  # cores // workers, under the OMP_NUM_THREADS the sweep inherits
    wandb_runs = set()
    for t in trials:
        metrics, run_dir = t.user_attrs["metrics"], Path(t.user_attrs["run_dir"])
        assert metrics["perf/torch_threads"] == threads and metrics["train/steps"] == 3
        assert run_dir.parent == spec.runs_dir
        saved = yaml.safe_load((run_dir / "config.yaml").read_text())
        assert saved["optim"]["lr"] == t.params["optim.lr"] and saved["run"]["group"] == spec.name
        runs = list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
        assert len(runs) == 1 and runs[0].stat().st_size > 0
        wandb_runs.add(runs[0].name)
        info = wandb_file.run_info(runs[0])  # what W&B itself recorded for the trial's run
        assert info["group"] == spec.name and info["job_type"] == t.user_attrs["arm"]
        assert f"optim.lr={t.params['optim.lr']}" in info["tags"] and "seed:0" in info["tags"]
        assert not [tag for tag in info["tags"] if tag.startswith("seed=")]  # one seed tag, the run's own
        assert info["config"]["optim"]["lr"] == t.params["optim.lr"] and info["config"]["run"]["seed"] == 0
        assert wandb_file.summary(runs[0])["val/acc"] == pytest.approx(t.value)  # the objective
        log = Path(t.user_attrs["log"]).read_text()
        assert f"trial {t.number}: val/acc=" in log and "max_steps=3" in log  # its own output, in its log
    assert len(wandb_runs) == 2  # one W&B run per trial


def _long_trial_spec(tmp_path: Path, name: str) -> Path:
    """One trial of 120 SFT steps with a checkpoint every 5: still training when its first checkpoint lands."""
    spec_path = _spec(tmp_path, "preloaded")
    body = yaml.safe_load(spec_path.read_text())
    body.update(name=name, axes={"optim.lr": [0.002]}, heartbeat_interval=1)
    body["overrides"] = ["data.sources.0.n_prompts=400", "sft.max_steps=120", "sft.tokens_per_micro_batch=400",
                         "data.eval_sources.0.n_prompts=8", "eval.max_new_tokens=16", "trainer.checkpoint_every=5"]
    spec_path.write_text(yaml.safe_dump(body, sort_keys=False))
    return spec_path


def _sweep_command(spec_path: Path) -> tuple[list[str], dict[str, str]]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    return [sys.executable, "-m", "klear_lab.cli_sweep", "sweep", str(spec_path), "--workers", "1"], env


def _sweep_until_checkpoint(spec_path: Path, stderr: int = subprocess.DEVNULL) -> subprocess.Popen:
    """``klear-lab sweep SPEC``, started and returned once its trial wrote its first checkpoint."""
    cmd, env = _sweep_command(spec_path)
    sweep = subprocess.Popen(cmd, cwd=spec_path.parent, env=env, stdout=subprocess.DEVNULL, stderr=stderr, text=True)
    deadline = time.time() + 300
    while not list(load_spec(spec_path).runs_dir.glob("*/checkpoints/last.ckpt")):
        assert sweep.poll() is None and time.time() < deadline, "no checkpoint before the sweep ended"
        time.sleep(0.2)
    return sweep


def test_a_trial_killed_with_its_sweep_is_resumed_from_its_checkpoint(tmp_path):
    """``kill -9`` of the sweep after the trial's first checkpoint; the same command again retries the
    trial (Optuna's heartbeat retry), which continues the killed run instead of starting over."""
    spec_path = _long_trial_spec(tmp_path, "resume_trial")
    spec = load_spec(spec_path)
    first = _sweep_until_checkpoint(spec_path)
    time.sleep(0.5)
    os.kill(first.pid, signal.SIGKILL)  # the trial dies with its sweep
    first.wait()
    (killed,) = [p for p in spec.runs_dir.iterdir() if not p.name.startswith(".")]
    from klear_lab.cli import main

    assert main(["resume", str(killed)]) == 2  # alone, it completed outside the study, which trained it again
    assert not (killed / "checkpoints" / "last.ckpt.tmp").exists() and json.loads(
        (killed / "run.json").read_text()).get("attempts", 1) == 1

    cmd, env = _sweep_command(spec_path)
    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"resuming {killed}" in again.stdout + again.stderr
    trials = open_study(spec, default_storage_url(spec), create=False, heartbeat=False).get_trials()
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE"]
    assert trials[1].system_attrs["failed_trial"] == 0 and trials[1].user_attrs["run_dir"] == str(killed)
    assert list(spec.runs_dir.iterdir()) == [killed]  # no second run directory
    record = json.loads((killed / "run.json").read_text())
    assert record["status"] == "completed" and record["attempts"] == 2
    assert trials[1].user_attrs["metrics"]["train/steps"] == 120
    assert len(list((killed / "wandb").glob("offline-run-*"))) == 2  # one W&B run id, two attempts


def test_a_trial_killed_by_ctrl_c_of_its_sweep_is_recorded_as_interrupted(tmp_path):
    """Ctrl-C of the sweep SIGKILLs its trial, whose run.json kept saying running (``klear-lab runs``: stopped,
    as after a ``kill -9``). The worker records it as a Ctrl-C'd ``klear-lab train`` records itself, and the
    rerun's retry may still continue it: ``resume_config`` is what the retry checks first."""
    from klear_lab.resume import resume_config
    from klear_lab.run_list import list_runs

    spec_path = _long_trial_spec(tmp_path, "ctrl_c_trial")
    sweep = _sweep_until_checkpoint(spec_path, stderr=subprocess.PIPE)
    os.kill(sweep.pid, signal.SIGINT)  # to the sweep only: a terminal's would also reach the trial, which races
    _, err = sweep.communicate(timeout=60)  # to the end of stderr: until the resource tracker, the last, exits
    assert sweep.returncode == 130, err[-3000:]  # the kill (the worker records the run either way)
    assert "leaked semaphore" not in err  # the killed trial's progress-bar lock
    (run_dir,) = [p for p in load_spec(spec_path).runs_dir.iterdir() if not p.name.startswith(".")]
    record = json.loads((run_dir / "run.json").read_text())
    assert (record["status"], record.get("error")) == ("failed", "interrupted (Ctrl-C)")
    (row,) = list_runs([run_dir])
    assert row.status == "failed" and row.note.startswith("interrupted (Ctrl-C) -> sweep trial: run the sweep again")
    assert resume_config(run_dir)["optim"]["lr"] == 0.002


def test_a_ctrl_c_while_the_trial_server_imports_prints_no_traceback_of_it(tmp_path):
    """Ctrl-C reaches the whole process group; the preloaded server, still importing torch & co., printed a
    ~40-line KeyboardInterrupt traceback beside the sweep's own lines (found by a new-user walkthrough)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    proc = subprocess.Popen([sys.executable, "-m", "klear_lab.cli", "sweep", str(_spec(tmp_path, "preloaded"))],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    for line in proc.stdout:  # the study is set up: the server has been importing for a few seconds
        if "enqueued now" in line:
            break
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert "forkserver" not in err and "Traceback" not in err, err[-3000:]
