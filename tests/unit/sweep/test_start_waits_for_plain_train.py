"""A ``klear-lab train`` (or ``resume``) of a starting point's own config holds its lock while it runs
(``start_sharing.train_holds``, taken by ``cli._run_held``), so a sweep or a run starting from it waits and
then uses its run instead of training it beside it. The runs are faked: nothing trains here."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from sweep_fixtures import PARENT_RUN as RUN_NAME
from test_start_sharing_from_train import (
    _child,
    _completed_run,
    _in_thread,
    _parent_hash,
    _sweep,
    _Trained,
    workdir,  # noqa: F401 - the fixture
)

from klear_lab import cli, starting_point
from klear_lab.config.compose import compose
from klear_lab.distributed import RUN_DIR_ENV
from klear_lab.run import RunResult

FIRST_DONE = threading.Event()  # the first faked train of a test made its run


@pytest.fixture(autouse=True)
def _first_not_done():
    FIRST_DONE.clear()


def _train_in_a_thread(monkeypatch, overrides: tuple[str, ...] = (),
                       release: threading.Event | None = None) -> tuple[threading.Thread, threading.Event]:
    """``klear-lab train parent.yaml OVERRIDES`` in a thread: its run takes 1 s (or until ``release``), then
    leaves a completed run of the hash its run would record; returned once that run began."""
    import klear_lab.run

    running, making = threading.Event(), threading.Lock()
    cfg = compose(Path("parent.yaml").resolve(), ["trainer.num_threads=1", *overrides])

    def run_experiment(cfg, resume=None):
        running.set()
        if release is None or threading.current_thread() is threading.main_thread():
            time.sleep(1.0)
        else:
            assert release.wait(30)
        with making:  # a second train's fake finishes at about the same time
            made = Path("runs") / RUN_NAME
            if not made.is_dir():
                _completed_run(Path("runs"), _parent_hash(), cfg["run"]["seed"])
                FIRST_DONE.set()
            return RunResult(made)

    monkeypatch.setattr(klear_lab.run, "run_experiment", run_experiment)
    return _in_thread(lambda: cli._run_held(cfg)), running


def test_a_sweep_waits_for_a_train_of_its_starting_point_then_takes_its_run(workdir, monkeypatch):  # noqa: F811
    thread, running = _train_in_a_thread(monkeypatch)
    assert running.wait(30)
    spec, lines = _sweep()  # training it would raise _Trained
    thread.join(30)
    assert not thread.is_alive()
    assert lines[0] == ("sweep quickstart: starting point: waiting for another sweep or a `klear-lab train` "
                        "training or sharing the same one, to share it")
    assert f"reusing {(workdir / 'runs' / RUN_NAME).resolve()} " in lines[1]
    assert starting_point.find_completed_run(spec.runs_dir, _parent_hash(), seed=0) == spec.runs_dir / RUN_NAME
    assert not list(workdir.rglob(".init-*.lock"))  # the train's went with it


def test_a_run_starting_from_it_waits_for_the_train_and_uses_its_run(workdir, monkeypatch, capsys):  # noqa: F811
    thread, running = _train_in_a_thread(monkeypatch)
    assert running.wait(30)
    monkeypatch.setattr(starting_point, "_train_parent", lambda *a, **k: pytest.fail("trained it beside the train"))
    child = _child()
    starting_point.resolve_init_from(child)
    thread.join(30)
    assert child["model"]["name_or_path"] == str((workdir / "runs" / RUN_NAME).resolve())
    assert "waiting for another process training or sharing the same starting point" in capsys.readouterr().err


def test_a_train_of_another_seed_is_not_waited_for(workdir, monkeypatch):  # noqa: F811
    """The lock is per config and seed: the sweep (seed 0) goes on, and trains its own."""
    release = threading.Event()
    thread, running = _train_in_a_thread(monkeypatch, ("run.seed=1",), release)
    assert running.wait(30)
    try:
        with pytest.raises(_Trained):
            _sweep()  # while the train runs: waiting on its lock, it would go on only once the train gave up
        assert thread.is_alive()  # still running: the sweep did not wait for it
    finally:
        release.set()
        thread.join(30)


def test_a_second_train_of_the_same_config_does_not_wait(workdir, monkeypatch):  # noqa: F811
    """It would not use the first's run (a train always trains), so waiting would only delay it."""
    thread, running = _train_in_a_thread(monkeypatch)
    assert running.wait(30)
    import klear_lab.run

    faked = klear_lab.run.run_experiment
    started_before_the_first_ended = []

    def second_run(cfg, resume=None):
        started_before_the_first_ended.append(not FIRST_DONE.is_set())
        return faked(cfg, resume)

    monkeypatch.setattr(klear_lab.run, "run_experiment", second_run)
    second = cli._run_held(compose(Path("parent.yaml").resolve(), ["trainer.num_threads=1"]))  # faked: 1 s
    thread.join(30)
    assert started_before_the_first_ended == [True]  # it ran beside the first, not after it
    assert second.run_dir.name == RUN_NAME


def test_ddp_ranks_above_zero_take_no_lock(workdir, monkeypatch):  # noqa: F811
    """Rank 0 holds it for the run; a rank Lightning relaunched runs the same command and must not wait on it."""
    import klear_lab.run

    taken: list[Path] = []
    monkeypatch.setattr(klear_lab.run, "run_experiment",
                        lambda cfg, resume=None: taken.extend(workdir.rglob(".init-*.lock")) or RunResult(workdir))
    cfg = compose(Path("parent.yaml").resolve(), ["trainer.num_threads=1"])
    cli._run_held(cfg)
    assert len(taken) == 1  # rank 0 (or no DDP) holds it while the run runs
    monkeypatch.setenv(RUN_DIR_ENV, str(workdir / "runs" / RUN_NAME))
    monkeypatch.setenv("LOCAL_RANK", "1")
    cli._run_held(cfg)
    assert len(taken) == 1


def test_a_resume_holds_it_in_the_directory_of_the_run_it_resumes(workdir, monkeypatch):  # noqa: F811
    import klear_lab.run

    seen: list[Path] = []
    monkeypatch.setattr(klear_lab.run, "run_experiment",
                        lambda cfg, resume=None: seen.extend(workdir.rglob(".init-*.lock")) or RunResult(workdir))
    cfg = compose(Path("parent.yaml").resolve(), ["trainer.num_threads=1", "run.out_dir=elsewhere"])
    cli._run_held(cfg, resume=workdir / "runs" / RUN_NAME)
    assert [p.parent for p in seen] == [workdir / "runs"]
    assert seen[0].name == f".init-{_parent_hash()}-s0.lock"


def test_the_middle_of_a_chain_is_locked_under_the_hash_its_child_computes_without_reading_data(workdir,  # noqa: F811
                                                                                            monkeypatch):
    """``klear-lab train child.yaml`` (RL from parent.yaml) locks the hash an experiment starting from the child
    computes for it: its parent's completed run as ``model.name_or_path``; found without reading the parent's
    records (that took about 3 s on every RL train of the quickstart)."""
    import klear_lab.run

    trained = _completed_run(workdir / "runs", _parent_hash())
    seen: list[Path] = []
    monkeypatch.setattr(klear_lab.run, "run_experiment",
                        lambda cfg, resume=None: seen.extend(workdir.rglob(".init-*.lock")) or RunResult(workdir))
    child = _child()
    with monkeypatch.context() as patched:
        patched.setattr(starting_point, "records_digests", lambda cfg: pytest.fail("read the parent's records"))
        cli._run_held(child)
    data = {"train": "rows", "eval": "rows"}  # what the grandchild's lookup reads: as the fake run recorded
    monkeypatch.setattr(starting_point, "records_digests", lambda cfg: data)
    (trained / "run.json").write_text(json.dumps({"status": "completed", "config_hash": _parent_hash(), "data": data}))
    (workdir / "grandchild.yaml").write_text("base: child.yaml\nmodel: {init_from: child.yaml}\n")
    from klear_lab.tracking import config_hash

    as_its_child_hashes = starting_point.parent_config(compose(Path("grandchild.yaml").resolve()))
    assert as_its_child_hashes["model"]["name_or_path"] == str(trained.resolve())
    assert [p.name for p in seen] == [f".init-{config_hash(as_its_child_hashes)}-s0.lock"]
