"""A sweep starts from a completed starting point that a single ``klear-lab train`` made in the ``run.out_dir``
beside its ``out_dir`` (``runs`` beside ``sweep_runs``), hard-linked into its runs dir, instead of training it
again: the other way round from ``test_start_sharing.py``. Fake completed runs: nothing trains here."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path

import pytest
import yaml
from sweep_fixtures import PARENT_RUN as RUN_NAME
from sweep_fixtures import REPO, TINY_PARENT

from klear_lab import starting_point
from klear_lab.start_sharing import SWEEP_ROOT, start_lock
from klear_lab.sweep import parents
from klear_lab.sweep.spec import load_spec
from klear_lab.tracking import config_hash


class _Trained(Exception):
    """Raised in place of the sweep training its starting point."""


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working dir with ``parent.yaml``, ``child.yaml`` (RL from it) and ``spec.yaml`` (a sweep of the child,
    default ``out_dir``); the sweep training its starting point raises."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "parent.yaml").write_text(yaml.safe_dump(TINY_PARENT))
    (tmp_path / "child.yaml").write_text(yaml.safe_dump(
        {"base": str(REPO / "experiments/quickstart/rl.yaml"), "model": {"init_from": "parent.yaml"}}))
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(
        {"name": "quickstart", "experiment": "child.yaml", "axes": {"rl.clip.name": ["ppo", "gppo"]}, "seeds": [0],
         "objective": {"metric": "val/acc", "direction": "maximize"}}))

    def train(*args, **kwargs):
        raise _Trained

    monkeypatch.setattr(parents, "_train", train)
    return tmp_path


def _sweep(out_dir: str | None = None) -> tuple[object, list[str]]:
    """Run the sweep's starting-point step (``parents.train_parent``); the spec and its log lines."""
    spec = load_spec("spec.yaml")
    if out_dir is not None:
        spec.out_dir = Path(out_dir)
    lines: list[str] = []
    parents.train_parent(spec, spec.compose(), 1, lines.append)
    return spec, lines


def _parent_hash() -> str:
    spec = load_spec("spec.yaml")
    cfg = {**(base := spec.compose()), "run": {**base["run"], "out_dir": str(spec.runs_dir)}}
    return config_hash(starting_point.parent_config(cfg))


def _completed_run(runs: Path, cfg_hash: str, seed: int = 0, data: dict | None = None,
                   status: str = "completed") -> Path:
    """What ``find_completed_run`` takes for a completed run: run.json, the saved seed, a final model."""
    run = runs / RUN_NAME
    (run / "model").mkdir(parents=True)
    (run / "model" / "config.json").write_text("{}")
    (run / "model" / "model.safetensors").write_bytes(b"weights")
    (run / "config.yaml").write_text(yaml.safe_dump({"run": {"seed": seed}}))
    record = {"status": status, "config_hash": cfg_hash, **({"data": data} if data else {})}
    (run / "run.json").write_text(json.dumps(record))
    return run


def test_a_sweep_links_the_starting_point_a_single_run_trained(workdir):
    trained = _completed_run(workdir / "runs", _parent_hash())
    spec, lines = _sweep()  # trains nothing: _train would raise
    copy = spec.runs_dir / RUN_NAME
    weights = Path("model") / "model.safetensors"
    assert (copy / weights).stat().st_ino == (trained / weights).stat().st_ino  # hard links, no extra disk
    assert lines == [f"sweep quickstart: starting point: reusing {trained.resolve()} (same config and seed, trained "
                     f"by `klear-lab train`), hard-linked into {copy}"]
    assert starting_point.find_completed_run(spec.runs_dir, _parent_hash(), seed=0) == copy  # what trials find
    assert not [*workdir.rglob(".start-*.lock"), *workdir.rglob(".sharing-*")]
    assert _sweep()[1] == [f"sweep quickstart: starting point: {copy} (trained before)"]  # a rerun: its own


def test_a_copy_made_where_hard_links_fail_is_called_a_copy(workdir, monkeypatch):
    def no_link(src, dst):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_link)
    trained = _completed_run(workdir / "runs", _parent_hash())
    spec, lines = _sweep()
    copy = spec.runs_dir / RUN_NAME
    assert (copy / "model" / "model.safetensors").read_bytes() == b"weights"
    assert lines == [f"sweep quickstart: starting point: reusing {trained.resolve()} (same config and seed, trained "
                     f"by `klear-lab train`), copied into {copy}"]


@pytest.mark.parametrize("differs", ["hash", "seed", "data", "still training"])
def test_a_single_runs_starting_point_of_another_config_seed_or_data_or_unfinished_is_not_taken(workdir, differs):
    wanted = _parent_hash()
    _completed_run(workdir / "runs", "0" * len(wanted) if differs == "hash" else wanted,
                   seed=1 if differs == "seed" else 0,
                   data={"train": "other rows", "eval": "other rows"} if differs == "data" else None,
                   status="running" if differs == "still training" else "completed")
    with pytest.raises(_Trained):
        _sweep()
    assert not (workdir / SWEEP_ROOT / "quickstart" / "runs" / RUN_NAME).exists()


@pytest.mark.parametrize("out_dir", ["elsewhere/sweep_runs", "my_sweeps"])
def test_only_the_sweep_root_beside_the_runs_takes_from_them(workdir, out_dir):
    """Where a single run would not look for the sweep's (`sweep_runs` beside its `runs`), the sweep does not
    look for the single run's either: a test's sweep in its own directory, a sweep given another --out-dir."""
    _completed_run(workdir / "runs", _parent_hash())
    with pytest.raises(_Trained):
        _sweep(out_dir)


def test_the_runs_looked_in_are_where_a_train_of_the_starting_point_writes(workdir):
    """The starting point's own ``run.out_dir``, relative to the working directory: not the default ``runs``."""
    (workdir / "parent.yaml").write_text(yaml.safe_dump({**TINY_PARENT, "run": {"out_dir": "sft_runs"}}))
    _completed_run(workdir / "runs", _parent_hash())
    with pytest.raises(_Trained):
        _sweep()
    trained = _completed_run(workdir / "sft_runs", _parent_hash())
    spec, lines = _sweep()
    assert f"reusing {trained.resolve()} " in lines[0] and (spec.runs_dir / RUN_NAME).is_dir()


def test_a_sweep_waits_for_the_lock_on_its_starting_point_then_takes_it(workdir):
    """The share is made under the sweeps' lock on that starting point, as a sibling sweep's is."""
    parent_hash = _parent_hash()
    (workdir / SWEEP_ROOT).mkdir()
    held = threading.Event()

    def holder() -> None:
        with start_lock(workdir / SWEEP_ROOT, parent_hash, 0):
            held.set()
            time.sleep(1.0)
            _completed_run(workdir / "runs", parent_hash)

    thread = threading.Thread(target=holder)
    thread.start()
    assert held.wait(30)
    try:
        spec, lines = _sweep()
    finally:
        thread.join()
    assert "waiting for another sweep" in lines[0] and "trained by `klear-lab train`" in lines[1]
    assert (spec.runs_dir / RUN_NAME).is_dir()


def test_a_share_whose_data_cannot_be_read_here_says_it_was_not_checked(workdir):
    data = workdir / "corpus.jsonl"
    data.write_text('{"prompt": "What is 1+1?", "answer": "2", "response": "\\\\boxed{2}"}\n')
    (workdir / "parent.yaml").write_text(yaml.safe_dump({**TINY_PARENT, "data": {
        **TINY_PARENT["data"], "sources": [{"name": "file", "path": str(data)}]}}))
    trained = _completed_run(workdir / "runs", _parent_hash(), data={"train": "the rows then"})
    data.unlink()
    said = re.escape(f"model.init_from parent.yaml: its data cannot be read here to check that the completed run "
                     f"{trained.resolve()} trained on it (")
    with pytest.warns(UserWarning, match=said):
        spec, lines = _sweep()
    assert (spec.runs_dir / RUN_NAME).is_dir() and "hard-linked" in lines[0]


def _planned() -> str | None:
    spec = load_spec("spec.yaml")
    return parents.planned_start(spec, spec.compose())


def test_validate_only_says_what_the_sweep_will_do_for_its_starting_point(workdir):
    """``--validate-only``'s line (``parents.planned_start``): looked up without linking anything."""
    assert _planned() == f"trains {workdir / 'parent.yaml'} (seed 0) first, on every core"
    trained = _completed_run(workdir / "runs", _parent_hash())
    assert _planned() == f"reuses {trained.resolve()} (trained by `klear-lab train`)"
    sibling = _completed_run(workdir / SWEEP_ROOT / "other" / "runs", _parent_hash())
    assert _planned() == f"reuses {sibling.resolve()} (trained by another sweep)"  # tried first, as the sweep does
    assert not (workdir / SWEEP_ROOT / "quickstart" / "runs").exists()  # nothing linked
    spec, _ = _sweep()
    assert _planned() == f"{spec.runs_dir / RUN_NAME} (trained before)"


def _child() -> dict:
    """What ``klear-lab train child.yaml`` composes: the same starting point as the sweep's, in ``runs``."""
    from klear_lab.config.compose import compose

    return compose(Path("child.yaml").resolve(), ["trainer.num_threads=1"])


def _in_thread(target) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)  # daemon: a deadlock fails the test, not the session
    thread.start()
    return thread


def _sweep_training_in_a_thread(monkeypatch) -> threading.Thread:
    """The sweep of ``spec.yaml`` in a thread, inside the training of its starting point (1 s, then completed);
    returned once that training began."""
    parent_hash, training = _parent_hash(), threading.Event()

    def sweep_trains(spec, cfg, threads, log):
        training.set()
        time.sleep(1.0)
        _completed_run(spec.runs_dir, parent_hash)

    monkeypatch.setattr(parents, "_train", sweep_trains)
    thread = _in_thread(_sweep)
    assert training.wait(30)
    return thread


def test_a_sweep_waits_for_a_train_training_its_starting_point_then_takes_it(workdir, monkeypatch):
    """A `klear-lab train` of the child training the starting point holds its lock on it; the sweep takes that
    lock first (the order the train takes both in), waits, and shares the run when it completes."""
    parent_hash, training = _parent_hash(), threading.Event()

    def train_parent(parent, wanted, init_from, out, quiet=False):
        training.set()
        time.sleep(1.0)
        return _completed_run(Path(out), wanted)

    monkeypatch.setattr(starting_point, "_train_parent", train_parent)
    child = _child()
    thread = _in_thread(lambda: starting_point.resolve_init_from(child))
    assert training.wait(30)
    spec, lines = _sweep()
    thread.join(30)
    assert not thread.is_alive()
    assert lines[0] == ("sweep quickstart: starting point: waiting for another sweep or a `klear-lab train` "
                        "training or sharing the same one, to share it")
    assert f"reusing {(workdir / 'runs' / RUN_NAME).resolve()} " in lines[1] and "klear-lab train" in lines[1]
    assert child["model"]["name_or_path"] == str((workdir / "runs" / RUN_NAME).resolve())
    assert starting_point.find_completed_run(spec.runs_dir, parent_hash, seed=0) == spec.runs_dir / RUN_NAME


@pytest.mark.parametrize("runs_made", [True, False], ids=["runs-made", "no-runs-yet"])
def test_a_train_started_while_a_sweep_trains_its_starting_point_waits_and_shares_it(workdir, monkeypatch, capsys,
                                                                                     runs_made):
    """The other way round: the train waits on whichever lock the sweep holds (the train's, where ``runs``
    was there when the sweep began, else the sweeps'), then shares the sweep's run; neither waits forever."""
    if runs_made:
        (workdir / "runs").mkdir()
    thread = _sweep_training_in_a_thread(monkeypatch)
    monkeypatch.setattr(starting_point, "_train_parent", lambda *a, **k: pytest.fail("the train trained it too"))
    child = _child()
    starting_point.resolve_init_from(child)
    thread.join(30)
    assert not thread.is_alive()
    assert child["model"]["name_or_path"] == str((workdir / "runs" / RUN_NAME).resolve())
    waited = ("waiting for another process training or sharing the same starting point" if runs_made
              else "waiting for a sweep training the same starting point")
    assert waited in capsys.readouterr().err


def test_a_symlinked_runs_is_still_beside_the_sweeps(workdir):
    """``runs`` linked to another disk: its runs are where a train of the starting point writes, beside
    ``sweep_runs`` (they were looked for beside the link's target, and never found)."""
    elsewhere = workdir / "disk" / "runs"
    elsewhere.mkdir(parents=True)
    (workdir / "runs").symlink_to(elsewhere)
    _completed_run(workdir / "runs", _parent_hash())
    spec, lines = _sweep()
    assert f"reusing {workdir / 'runs' / RUN_NAME} " in lines[0]
    assert (spec.runs_dir / RUN_NAME / "run.json").is_file()


def test_a_copy_a_killed_share_left_half_made_is_removed_by_the_next(workdir):
    """Only this starting point's leftovers go: a share of another one may be copying into the same runs dir."""
    parent_hash = _parent_hash()
    _completed_run(workdir / "runs", parent_hash)
    runs = workdir / SWEEP_ROOT / "quickstart" / "runs"
    left = runs / f".sharing-{parent_hash}-s0-killed" / "run"
    other = runs / f".sharing-{'0' * len(parent_hash)}-s0-copying" / "run"
    for half in (left, other):
        (half / "model").mkdir(parents=True)
    _sweep()
    assert not left.parent.exists() and other.is_dir()
    assert sorted(p.name for p in runs.iterdir()) == sorted([RUN_NAME, other.parent.name])


def test_a_sweep_waits_for_a_sibling_sweep_where_a_trains_runs_exist(workdir, monkeypatch):
    """Both sweeps take the train's lock first where ``runs/`` exists: the second waits there, says it waits
    for another sweep or a train, and shares the first one's starting point."""
    (workdir / "runs").mkdir()
    spec_text = (workdir / "spec.yaml").read_text()
    (workdir / "other.yaml").write_text(spec_text.replace("name: quickstart", "name: other"))
    thread = _sweep_training_in_a_thread(monkeypatch)
    monkeypatch.setattr(parents, "_train", lambda *a, **k: pytest.fail("the second sweep trained it too"))
    other = load_spec("other.yaml")
    lines: list[str] = []
    parents.train_parent(other, other.compose(), 1, lines.append)
    thread.join(30)
    assert not thread.is_alive()
    assert "waiting for another sweep or a `klear-lab train`" in lines[0]
    assert "(same config and seed, trained by another sweep)" in lines[1]
