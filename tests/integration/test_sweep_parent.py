"""A sweep trains its shared ``model.init_from`` starting point once, before any worker starts."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import lightning as L
import pytest
import yaml

from klear_lab import starting_point
from klear_lab.config.compose import compose
from klear_lab.errors import ConfigError
from klear_lab.run import run_experiment
from klear_lab.sweep.parents import ParentRunError, needs_parent, share_sibling_start, train_parent
from klear_lab.sweep.spec import load_spec
from klear_lab.tracking import config_hash

REPO = Path(__file__).resolve().parents[2]
TINY_PARENT = {
    "base": str(REPO / "experiments/quickstart/sft.yaml"),
    "data": {"sources": [{"name": "arith_r1", "n_prompts": 60, "levels": [1], "level_weights": [1.0]}],
             "eval_sources": [{"name": "arith", "levels": [1], "level_weights": [1.0], "n_prompts": 4}]},
    "sft": {"max_steps": 2}, "eval": {"max_new_tokens": 8}, "trainer": {"checkpoint": False},
    "tracking": {"wandb": {"enabled": False}},
}


def _spec(tmp_path: Path, parent: dict, axes: dict | None = None) -> Path:
    (tmp_path / "parent.yaml").write_text(yaml.safe_dump(parent))
    (tmp_path / "child.yaml").write_text(yaml.safe_dump(
        {"base": str(REPO / "experiments/quickstart/rl.yaml"), "model": {"init_from": "parent.yaml"}}))
    spec = {"name": "parents", "experiment": "child.yaml", "axes": axes or {"rl.clip.name": ["ppo", "gppo"]},
            "seeds": [0], "objective": {"metric": "val/acc", "direction": "maximize"}, "out_dir": str(tmp_path / "out")}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _base(spec) -> dict:
    return compose(spec.experiment, spec.overrides)


def test_parent_trained_once_and_found_by_trials(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = load_spec(_spec(tmp_path, TINY_PARENT))
    assert needs_parent(spec, _base(spec))
    lines: list[str] = []
    train_parent(spec, _base(spec), threads=1, log=lines.append)
    runs = spec.runs_dir
    found = starting_point.find_completed_run(runs, config_hash(compose(tmp_path / "parent.yaml")))
    assert found is not None and any("ready" in line for line in lines)
    # what a trial does: same parent hash whatever its threads and output dir, so nothing is retrained
    trial = compose(tmp_path / "child.yaml", [f"run.out_dir={runs}", "trainer.num_threads=1"])
    before = sorted(runs.iterdir())
    starting_point.resolve_init_from(trial)
    assert trial["model"]["name_or_path"] == str(found.resolve()) and sorted(runs.iterdir()) == before
    again: list[str] = []  # the sweep's command run again: said "starting point ... ready" for a run it only found
    train_parent(spec, _base(spec), threads=1, log=again.append)
    assert again == [f"sweep parents: starting point: {found} (trained before)"]
    assert not [*tmp_path.rglob(".init-*.lock"), *tmp_path.rglob(".start-*.lock")]  # they stayed for good


def test_a_specs_own_relative_plugin_is_read_from_its_directory_when_the_starting_point_trains(tmp_path,
                                                                                              monkeypatch):
    """The starting point's process was handed the spec's overrides as written and read ``plugins=[noop.py]``
    from the working directory, so a spec that validated failed there."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "noop.py").write_text('"""Registers nothing."""\n')
    path = _spec(tmp_path, TINY_PARENT)
    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), "overrides": ["plugins=[noop.py]"]}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    spec = load_spec(path)
    train_parent(spec, spec.compose(), threads=1, log=lambda line: None)
    assert "starting point: " in (spec.sweep_dir / "parent.log").read_text()
    assert [p.name for p in spec.runs_dir.iterdir() if (p / "model").is_dir()]  # the starting point's run


def test_failing_parent_stops_the_sweep_with_its_log(tmp_path):
    bad = {**TINY_PARENT, "data": {"sources": [{"name": "file", "path": str(tmp_path / "missing.jsonl")}]}}
    spec = load_spec(_spec(tmp_path, bad))
    with pytest.raises(ParentRunError, match="parent.log"):
        train_parent(spec, _base(spec), threads=1, log=lambda line: None)
    assert "missing.jsonl" in (spec.sweep_dir / "parent.log").read_text()


def test_no_shared_parent_when_an_axis_changes_it(tmp_path):
    spec = load_spec(_spec(tmp_path, TINY_PARENT, axes={"model.init_from": ["parent.yaml", "other.yaml"]}))
    assert not needs_parent(spec, _base(spec))


def test_another_sweep_reuses_the_starting_point(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    first = load_spec(_spec(tmp_path, TINY_PARENT))
    parent_hash = config_hash(compose(tmp_path / "parent.yaml"))
    train_parent(first, _base(first), threads=1, log=lambda line: None)
    found = starting_point.find_completed_run(first.runs_dir, parent_hash)
    second = load_spec(_spec(tmp_path, TINY_PARENT, axes={"rl.alpha": [0.0, 0.1]}), name="second")
    lines: list[str] = []
    train_parent(second, _base(second), threads=1, log=lines.append)
    copy = second.runs_dir / found.name
    assert [p for p in second.runs_dir.iterdir() if not p.name.startswith(".")] == [copy]  # nothing trained
    weights = next((found / "model").glob("*.safetensors"))
    assert (copy / "model" / weights.name).stat().st_ino == weights.stat().st_ino  # hard links, no extra disk
    assert any(f"reusing {found}" in line for line in lines), lines
    trial = compose(tmp_path / "child.yaml", [f"run.out_dir={second.runs_dir}", "trainer.num_threads=1"])
    starting_point.resolve_init_from(trial)
    assert trial["model"]["name_or_path"] == str(copy.resolve())
    assert share_sibling_start(trial) is None  # already here: nothing more to share

    # the first sweep deleted: the second keeps its starting point, so its later trials start alike
    shutil.rmtree(first.sweep_dir)
    assert starting_point.find_completed_run(second.runs_dir, parent_hash, seed=0) == copy

    # a starting point with another seed is a different model: not shared, trained here
    seven = load_spec(_spec(tmp_path, {**TINY_PARENT, "run": {"seed": 7}}), name="seven")
    train_parent(seven, _base(seven), threads=1, log=lambda line: None)
    own = starting_point.find_completed_run(seven.runs_dir, parent_hash, seed=7)
    assert own is not None and own.name != copy.name
    assert starting_point.find_completed_run(seven.runs_dir, parent_hash, seed=0) is None


def test_two_sweeps_started_together_train_the_starting_point_once(tmp_path, monkeypatch):
    """The second sweep waits on the first one's lock, then shares what it trained."""
    import threading

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    first = load_spec(_spec(tmp_path, TINY_PARENT))
    second = load_spec(_spec(tmp_path, TINY_PARENT, axes={"rl.alpha": [0.0, 0.1]}), name="second")
    logs: dict[str, list[str]] = {"first": [], "second": []}
    started = threading.Event()

    def run_first() -> None:
        def log(line: str) -> None:
            logs["first"].append(line)
            if "starting point (model.init_from)" in line:
                started.set()  # the lock is held and training has begun
        train_parent(first, _base(first), threads=1, log=log)

    thread = threading.Thread(target=run_first)
    thread.start()
    assert started.wait(60)
    train_parent(second, _base(second), threads=1, log=logs["second"].append)
    thread.join()
    parent_hash = config_hash(compose(tmp_path / "parent.yaml"))
    trained = starting_point.find_completed_run(first.runs_dir, parent_hash, seed=0)
    assert trained is not None and any("ready" in line for line in logs["first"])
    assert any("waiting for another sweep" in line for line in logs["second"]), logs["second"]
    assert any(f"reusing {trained}" in line for line in logs["second"]), logs["second"]
    assert not (second.sweep_dir / "parent.log").exists()  # the second sweep trained nothing


class _Preempted(L.Callback):
    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step >= 3:  # after the checkpoint of step 2
            raise RuntimeError("preempted")


def _stopped_parent(tmp_path: Path) -> tuple[Path, Path]:
    """A tiny starting point that failed at step 3 with a checkpoint of step 2: (its runs dir, its run)."""
    parent = {**TINY_PARENT, "sft": {"max_steps": 4}, "trainer": {"checkpoint": True, "checkpoint_every": 2}}
    _spec(tmp_path, parent)
    runs = tmp_path / "runs"
    first = compose(tmp_path / "parent.yaml", [f"run.out_dir={runs}", "trainer.num_threads=1"])
    with pytest.raises(RuntimeError, match="preempted"):
        run_experiment(first, callbacks=[_Preempted()])
    (stopped,) = _run_dirs(runs)
    record = json.loads((stopped / "run.json").read_text())
    assert (record["status"], record["host"]) == ("failed", socket.gethostname())
    return runs, stopped


def _run_dirs(runs: Path) -> list[Path]:
    return sorted(p for p in runs.iterdir() if p.is_dir())


def _child(tmp_path: Path, runs: Path) -> dict:
    return compose(tmp_path / "child.yaml", [f"run.out_dir={runs}", "trainer.num_threads=1"])


def test_a_stopped_starting_point_is_resumed_not_trained_again(tmp_path, monkeypatch):
    """Ctrl-C (or a kill) while an RL run trains its ``model.init_from`` parent, then the same command:
    the parent continues from its checkpoint in its own run directory."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    runs, stopped = _stopped_parent(tmp_path)
    child = _child(tmp_path, runs)
    starting_point.resolve_init_from(child)
    assert child["model"]["name_or_path"] == str(stopped.resolve())
    assert _run_dirs(runs) == [stopped]  # no second parent run
    record = json.loads((stopped / "run.json").read_text())
    assert (record["status"], record["attempts"]) == ("completed", 2)
    assert (stopped / "model" / "config.json").is_file()
    assert not list(runs.glob(".init-*.lock"))


def test_a_starting_point_that_cannot_resume_is_trained_again(tmp_path, monkeypatch, capsys):
    """One stopped on another machine is left alone; one whose checkpoint does not load is not retried forever."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    runs, stopped = _stopped_parent(tmp_path)
    record_path = stopped / "run.json"
    record = json.loads(record_path.read_text())
    record_path.write_text(json.dumps({**record, "host": "another-machine"}))
    parent_hash = config_hash(starting_point.parent_config(_child(tmp_path, runs)))
    assert starting_point.find_resumable_run(runs, parent_hash, seed=0) is None
    record_path.write_text(json.dumps(record))
    assert starting_point.find_resumable_run(runs, parent_hash, seed=0) == stopped

    (stopped / "checkpoints" / "last.ckpt").write_bytes(b"not a checkpoint")
    assert starting_point.find_resumable_run(runs, parent_hash, seed=0) is None  # its checkpoint does not load
    child = _child(tmp_path, runs)
    starting_point.resolve_init_from(child)
    assert "no completed run of it" in capsys.readouterr().err
    (new,) = set(_run_dirs(runs)) - {stopped}
    assert child["model"]["name_or_path"] == str(new.resolve())
    assert json.loads((new / "run.json").read_text())["status"] == "completed"


def test_a_starting_point_trained_on_an_edited_data_file_is_trained_again(tmp_path, monkeypatch, capsys):
    """The config names a data file, not its contents: after an edit, an RL run started from the model
    trained on the file's old rows, its config hash unchanged. The run's ``data`` digests tell them apart."""
    from klear_lab.dry_run import init_from_rows

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    rows = [{"prompt": f"What is {i}+{i + 1}?", "answer": str(2 * i + 1),
             "response": f"<think>{i}+{i + 1}={2 * i + 1}</think> \\boxed{{{2 * i + 1}}}"} for i in range(40)]
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    file_source = {"sources": [{"name": "file", "path": "sft.jsonl"}],
                   "eval_sources": [{"name": "file", "path": "sft.jsonl", "limit": 4}]}
    _spec(tmp_path, {**TINY_PARENT, "data": file_source})
    runs = tmp_path / "runs"
    first = _child(tmp_path, runs)
    starting_point.resolve_init_from(first)
    (trained,) = _run_dirs(runs)
    said = capsys.readouterr().err  # the RL command trained its SFT parent without a word of it
    assert f"model.init_from {tmp_path / 'parent.yaml'}: no completed run of it (this config, seed 0) in " in said
    assert "training it first, a whole sft run" in said and f"starting point ready: {trained}" in said
    stat = data.stat()  # the files as the run read them: the next run need not read a corpus to know them
    assert json.loads((trained / "run.json").read_text())["data_files"] == {
        str(data.resolve()): [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]}
    with monkeypatch.context() as patch:
        patch.setattr(starting_point, "records_digests", lambda cfg: pytest.fail("read the unchanged data again"))
        unchanged = _child(tmp_path, runs)
        starting_point.resolve_init_from(unchanged)
    assert unchanged["model"]["name_or_path"] == str(trained.resolve())

    data.write_text("".join(json.dumps({**r, "response": r["response"].replace("<think>", "<think>so ")}) + "\n"
                            for r in rows))
    (row,) = init_from_rows(_child(tmp_path, runs))
    assert f"its completed run {trained} trained on other records" in row[1] and "TRAINS IT" in row[1]
    edited = _child(tmp_path, runs)
    starting_point.resolve_init_from(edited)
    said = capsys.readouterr().err
    assert "trained on other records than its data files hold now (train: " in said
    assert "no completed run of it" not in said  # it said both
    (retrained,) = set(_run_dirs(runs)) - {trained}
    assert edited["model"]["name_or_path"] == str(retrained.resolve())

    data.write_text("".join(json.dumps(r) + "\n" for r in rows))  # the old rows again: the first run fits them
    restored = _child(tmp_path, runs)
    starting_point.resolve_init_from(restored)
    assert restored["model"]["name_or_path"] == str(trained.resolve())
    assert f"using {trained}, trained on these" in capsys.readouterr().err
    assert len(_run_dirs(runs)) == 2

    data.unlink()  # a corpus deleted after training: the run used its starting point, and still does
    gone = _child(tmp_path, runs)
    with pytest.warns(UserWarning, match="its data cannot be read here to check that its completed run"):
        starting_point.resolve_init_from(gone)
    assert gone["model"]["name_or_path"] == str(retrained.resolve())  # the newest, as before the check
    with pytest.warns(UserWarning, match="its data cannot be read here"):
        (row,) = init_from_rows(_child(tmp_path, runs))
    assert row[1].endswith(f"its completed run {retrained}")


def test_reading_a_starting_points_data_leaves_the_global_rngs_as_they_were(tmp_path):
    """The digests are read under the seed the run sets first; the RL run's own seeded state is put back."""
    import random

    import numpy as np
    import torch

    parent = starting_point.parent_config(compose(REPO / "experiments/quickstart/rl.yaml", [f"run.out_dir={tmp_path}"]))
    L.seed_everything(123, verbose=False)
    expected = random.random(), float(np.random.rand()), float(torch.rand(()))
    L.seed_everything(123, verbose=False)
    digests = starting_point.records_digests(parent)
    assert (random.random(), float(np.random.rand()), float(torch.rand(()))) == expected
    L.seed_everything(7, verbose=False)  # whatever the caller's state, the same digests
    assert starting_point.records_digests(parent) == digests


def test_a_sibling_start_trained_on_other_data_is_not_shared(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "sft.jsonl"
    rows = [{"prompt": f"What is {i}+1?", "answer": str(i + 1), "response": f"\\boxed{{{i + 1}}}"} for i in range(30)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    parent = {**TINY_PARENT, "data": {"sources": [{"name": "file", "path": str(data)}],
                                      "eval_sources": [{"name": "file", "path": str(data), "limit": 4}]}}
    first = load_spec(_spec(tmp_path, parent))
    train_parent(first, _base(first), threads=1, log=lambda line: None)
    (found,) = _run_dirs(first.runs_dir)
    data.write_text("".join(json.dumps(r) + "\n" for r in rows[:20]))  # fewer rows now
    second = load_spec(_spec(tmp_path, parent, axes={"rl.alpha": [0.0, 0.1]}), name="second")
    lines: list[str] = []
    train_parent(second, _base(second), threads=1, log=lines.append)
    assert not any("reusing" in line for line in lines), lines
    (own,) = _run_dirs(second.runs_dir)
    assert own.name != found.name  # trained here, on the 20 rows


@pytest.mark.parametrize(("passed_over", "which"), [
    (False, "has no completed run in "),
    (True, "has no completed run trained on the records its data files hold now in ")])
def test_a_multi_device_starting_point_is_not_trained_from_here(tmp_path, passed_over, which):
    """Its DDP launcher would run this command again, not the parent's; after a completed run was passed over
    for edited data, "has no completed run" read as a contradiction."""
    parent = compose(REPO / "experiments/quickstart/sft.yaml", [f"run.out_dir={tmp_path}", "trainer.devices=2",
                                                                 "trainer.strategy=ddp", "trainer.accelerator=cpu"])
    with pytest.raises(ConfigError, match=f"trains on several devices and {which}"):
        starting_point._train_parent(parent, config_hash(parent), "sft.yaml", tmp_path, quiet=passed_over)


def test_a_sigterm_while_the_starting_point_trains_is_passed_on_and_waited_for(tmp_path):
    """The sweep exited 143 at once with nothing said, and its starting point's training went on, orphaned (a
    review). Now the training stops at its step's end with a checkpoint, the sweep says so and exits 143, and
    the same command resumes the starting point from that checkpoint."""
    import os
    import signal
    import subprocess
    import sys
    import time

    parent = {**TINY_PARENT, "sft": {"max_steps": 100000}, "trainer": {"checkpoint": True}}
    path = _spec(tmp_path, parent)
    spec = load_spec(path)
    log = tmp_path / "sweep.log"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "klear_lab.cli_sweep", "sweep", str(path)]
    with open(log, "ab") as out:
        sweep = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.time() + 240
    while not list(spec.runs_dir.glob("*/csv/metrics.csv")):  # the starting point is training
        assert sweep.poll() is None and time.time() < deadline, log.read_text()[-3000:]
        time.sleep(0.5)
    (record,) = spec.runs_dir.glob("*/run.json")
    child = json.loads(record.read_text())["pid"]
    sweep.send_signal(signal.SIGTERM)
    assert sweep.wait(timeout=180) == 143, log.read_text()[-3000:]
    said = log.read_text()
    assert "starting point stopped by SIGTERM" in said and "terminated (SIGTERM): rerun the same command" in said
    assert "(the starting point continues from its checkpoint)" in said  # parents.resumable_start found it
    with pytest.raises(ProcessLookupError):  # not orphaned: it stopped before the sweep exited
        os.kill(child, 0)
    stopped = json.loads(record.read_text())
    assert stopped["status"] != "running" and list(record.parent.glob("checkpoints/*")), stopped
