"""A ``klear-lab train`` (or ``resume``) of a starting point's own config holds its lock while it runs
(``run_experiment(hold_start=True)``: ``start_sharing.train_holds``), so a sweep or a run starting from it waits
and then uses its run instead of training it beside it. The runs are faked (``run._run``): nothing trains here."""

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

import klear_lab.run
from klear_lab import starting_point
from klear_lab.config.compose import compose
from klear_lab.distributed import RUN_DIR_ENV
from klear_lab.run import RunResult, run_experiment
from klear_lab.tracking import config_hash

FIRST_DONE = threading.Event()  # the first faked train of a test made its run


@pytest.fixture(autouse=True)
def _first_not_done():
    FIRST_DONE.clear()


def _parent(*overrides: str) -> dict:
    return compose(Path("parent.yaml").resolve(), ["trainer.num_threads=1", *overrides])


def _locks(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob(".init-*.lock"))


def _train_in_a_thread(monkeypatch, overrides: tuple[str, ...] = (),
                       release: threading.Event | None = None) -> tuple[threading.Thread, threading.Event]:
    """``klear-lab train parent.yaml OVERRIDES`` in a thread: its run takes 1 s (or until ``release``), then
    leaves a completed run of the hash its run would record; returned once that run began."""
    running, making = threading.Event(), threading.Lock()
    runs, parent_hash = Path("runs").absolute(), _parent_hash()  # absolute: see _train_the_chain

    def fake_run(cfg, *args, **kwargs):
        running.set()
        if release is None or threading.current_thread() is threading.main_thread():
            time.sleep(1.0)
        else:
            assert release.wait(30)
        with making:  # a second train's fake finishes at about the same time
            made = runs / RUN_NAME
            if not made.is_dir():
                _completed_run(runs, parent_hash, cfg["run"]["seed"])
                FIRST_DONE.set()
            return RunResult(made)

    monkeypatch.setattr(klear_lab.run, "_run", fake_run)
    cfg = _parent(*overrides)
    return _in_thread(lambda: run_experiment(cfg, hold_start=True)), running


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
    assert not _locks(workdir)  # the train's went with it


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
    faked, started_before_the_first_ended = klear_lab.run._run, []

    def second_run(cfg, *args, **kwargs):
        started_before_the_first_ended.append(not FIRST_DONE.is_set())
        return faked(cfg, *args, **kwargs)

    monkeypatch.setattr(klear_lab.run, "_run", second_run)
    second = run_experiment(_parent(), hold_start=True)  # faked: 1 s
    thread.join(30)
    assert started_before_the_first_ended == [True]  # it ran beside the first, not after it
    assert second.run_dir.name == RUN_NAME


def _seen_locks(monkeypatch, root: Path) -> list[list[str]]:
    """Fake ``run._run``: record the lock files under ``root`` while the run would run."""
    seen: list[list[str]] = []

    def fake_run(cfg, *args, **kwargs):
        seen.append(_locks(root))
        return RunResult(root)

    monkeypatch.setattr(klear_lab.run, "_run", fake_run)
    return seen


def test_what_takes_the_lock(workdir, monkeypatch):  # noqa: F811
    """Held by `klear-lab train` and `resume` (hold_start) while they run; not by other callers (a sweep's trials,
    notebooks), an eval, or a DDP rank Lightning relaunched (rank 0 holds it for the run)."""
    seen = _seen_locks(monkeypatch, workdir)
    run_experiment(_parent(), hold_start=True)
    run_experiment(_parent())
    run_experiment(compose(Path("parent.yaml").resolve(), ["run.kind=eval"]), hold_start=True)
    monkeypatch.setenv(RUN_DIR_ENV, str(workdir / "runs" / RUN_NAME))
    monkeypatch.setenv("LOCAL_RANK", "1")
    run_experiment(_parent(), hold_start=True)
    assert seen == [[f".init-{_parent_hash()}-s0.lock"], [], [], []]
    assert not _locks(workdir)


@pytest.mark.parametrize("given", ["whole", "dot"], ids=["path", "resume-dot-from-inside"])
def test_a_resume_holds_it_in_the_directory_of_the_run_it_resumes(workdir, monkeypatch, given):  # noqa: F811
    from klear_lab import run

    seen: list[Path] = []
    monkeypatch.setattr(run, "_run", lambda cfg, *a, **k: seen.extend(workdir.rglob(".init-*.lock")) or RunResult(cfg))
    monkeypatch.setattr(run, "run_lock", lambda run_dir: __import__("contextlib").nullcontext())
    monkeypatch.setattr(run, "check_resumable", lambda run_dir, cfg: None)
    stopped, cfg, wanted = workdir / "runs" / RUN_NAME, _parent("run.out_dir=elsewhere"), _parent_hash()
    stopped.mkdir(parents=True)
    if given == "dot":
        monkeypatch.chdir(stopped)
    run_experiment(cfg, resume=stopped if given == "whole" else ".", hold_start=True)
    assert [p.parent for p in seen] == [workdir / "runs"]
    assert seen[0].name == f".init-{wanted}-s0.lock"


def test_a_runs_dir_this_user_cannot_write_to_holds_nothing_and_the_run_says_why(workdir, monkeypatch):  # noqa: F811
    """It raised a PermissionError traceback from the lock file; the run's own check names run.out_dir."""
    seen = _seen_locks(monkeypatch, workdir)
    def denied(*args):  # as for a non-root user (tests run as root)
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("klear_lab.file_lock.os.open", denied)
    run_experiment(_parent(), hold_start=True)
    assert seen == [[]]


def test_a_refused_run_leaves_no_directory_made_for_the_lock(workdir, monkeypatch):  # noqa: F811
    from klear_lab.errors import DataError

    def refused(cfg, *args, **kwargs):
        assert _locks(workdir)  # held while it ran
        raise DataError("a bad row")

    monkeypatch.setattr(klear_lab.run, "_run", refused)
    with pytest.raises(DataError):
        run_experiment(_parent("run.out_dir=fresh/runs"), hold_start=True)
    assert not (workdir / "fresh").exists()


# A chain: parent.yaml (SFT) <- child.yaml (RL) <- grandchild.yaml (RL from the child). `klear-lab train
# child.yaml` trains parent.yaml first; a run of grandchild.yaml hashes child.yaml with the parent's run in it.

DATA = {"train": "the rows", "eval": "the held-out rows"}


def _child_run(cfg: dict, runs: Path) -> Path:
    """A completed run of the child config ``cfg`` (its starting point resolved) in ``runs``, named apart from the
    parent's."""
    run = runs / "child-20250101-000000-abcdef-s0"
    (run / "model").mkdir(parents=True)
    (run / "model" / "config.json").write_text("{}")
    (run / "model" / "model.safetensors").write_bytes(b"weights")
    (run / "config.yaml").write_text("run: {seed: 0}\n")
    (run / "run.json").write_text(json.dumps({"status": "completed", "config_hash": config_hash(cfg), "data": DATA}))
    return run


def _train_the_chain(monkeypatch, parent_done: threading.Event, child_ready: threading.Event) -> threading.Thread:
    """``klear-lab train child.yaml`` in a thread: it trains the parent (its run made, once ``parent_done`` is set),
    resolves it as ``stages.rl`` would, then trains itself until ``child_ready`` is set. Returned once it holds
    its lock."""
    holding, runs, parent_hash = threading.Event(), Path("runs").absolute(), _parent_hash()

    def fake_run(cfg, prepare, callbacks, resume, resumable, hold_resolved=None):  # absolute paths: a thread
        holding.set()                                                            # left behind by a failed test
        assert parent_done.wait(30)                                              # writes nothing in the repo
        parent = _completed_run(runs, parent_hash, data=DATA)
        cfg["model"]["name_or_path"] = str(parent.resolve())  # what resolve_init_from does in prepare_rl
        hold_resolved()
        assert child_ready.wait(30)
        return RunResult(_child_run(cfg, runs))

    monkeypatch.setattr(klear_lab.run, "_run", fake_run)
    child = _child()
    thread = _in_thread(lambda: run_experiment(child, hold_start=True))
    assert holding.wait(30)
    return thread


def _grandchild() -> dict:
    Path("grandchild.yaml").write_text("base: child.yaml\nmodel: {init_from: child.yaml}\n")
    return compose(Path("grandchild.yaml").resolve(), ["trainer.num_threads=1"])


@pytest.mark.parametrize("started", ["while-it-trains-the-parent", "once-the-parent-is-done"])
def test_a_run_starting_from_the_middle_of_a_chain_waits_for_its_train_and_uses_its_run(workdir, monkeypatch,  # noqa: F811
                                                                                         started):
    """Either way it waits and uses the child's run (a review: it waited and then trained the child again, as
    its hash had changed meanwhile; or, started once the parent was done, it did not wait at all)."""
    parent_done, child_ready = threading.Event(), threading.Event()
    monkeypatch.setattr(starting_point, "records_digests", lambda cfg: DATA)  # what the faked parent run recorded
    thread = _train_the_chain(monkeypatch, parent_done, child_ready)  # its lock: the child without the parent's run
    if started == "once-the-parent-is-done":
        parent_done.set()
        for _ in range(300):  # until it holds the lock under the child's hash with the parent's run in it
            if len(_locks(workdir)) == 2:
                break
            time.sleep(0.01)
    threading.Timer(1.0, lambda: (parent_done.set(), child_ready.set())).start()
    monkeypatch.setattr(starting_point, "_train_parent", lambda *a, **k: pytest.fail("trained the child again"))
    grandchild = _grandchild()
    starting_point.resolve_init_from(grandchild)
    thread.join(30)
    assert grandchild["model"]["name_or_path"] == str((workdir / "runs" / "child-20250101-000000-abcdef-s0").resolve())
