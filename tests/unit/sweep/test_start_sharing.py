"""A single run (``klear-lab train``) starts from a completed starting point a sweep under ``sweep_runs/``
trained with the same config hash and seed, hard-linked into its own output dir, instead of training it
again (it trained its own under ``runs/``). Fake completed runs: nothing trains here."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest
import yaml
from sweep_fixtures import PARENT_RUN as RUN_NAME
from sweep_fixtures import REPO, TINY_PARENT

from klear_lab import starting_point
from klear_lab.config.compose import compose
from klear_lab.start_sharing import SWEEP_ROOT, start_lock
from klear_lab.sweep.spec import SweepSpec
from klear_lab.tracking import config_hash


class _Trained(Exception):
    """Raised in place of training the starting point."""


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working dir with ``parent.yaml`` and ``child.yaml`` (RL from it); training the parent raises."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "parent.yaml").write_text(yaml.safe_dump(TINY_PARENT))
    (tmp_path / "child.yaml").write_text(yaml.safe_dump(
        {"base": str(REPO / "experiments/quickstart/rl.yaml"), "model": {"init_from": "parent.yaml"}}))

    def train(*args, **kwargs):
        raise _Trained

    monkeypatch.setattr(starting_point, "_train_parent", train)
    return tmp_path


def _child(out_dir: Path) -> dict:
    return compose(Path("child.yaml").resolve(), [f"run.out_dir={out_dir}", "trainer.num_threads=1"])


def _parent_hash(child: dict) -> str:
    return config_hash(starting_point.parent_config(child))


def _completed_run(runs: Path, cfg_hash: str, seed: int = 0, data: dict | None = None, name: str = RUN_NAME) -> Path:
    """What ``find_completed_run`` takes for a completed run: run.json, the saved seed, a final model."""
    run = runs / name
    (run / "model").mkdir(parents=True)
    (run / "model" / "config.json").write_text("{}")
    (run / "model" / "model.safetensors").write_bytes(b"weights")
    (run / "config.yaml").write_text(yaml.safe_dump({"run": {"seed": seed}}))
    record = {"status": "completed", "config_hash": cfg_hash, **({"data": data} if data else {})}
    (run / "run.json").write_text(json.dumps(record))
    return run


def test_the_sweep_root_searched_is_the_sweeps_default_out_dir():
    assert SweepSpec.__dataclass_fields__["out_dir"].default == SWEEP_ROOT


def test_a_single_run_links_the_starting_point_a_sweep_trained(workdir, capsys):
    child = _child(workdir / "runs")
    trained = _completed_run(workdir / SWEEP_ROOT / "quickstart" / "runs", _parent_hash(child))
    starting_point.resolve_init_from(child)  # trains nothing: _train_parent would raise
    copy = workdir / "runs" / RUN_NAME
    assert child["model"]["name_or_path"] == str(copy.resolve())
    weights = Path("model") / "model.safetensors"
    assert (copy / weights).stat().st_ino == (trained / weights).stat().st_ino  # hard links, no extra disk
    said = capsys.readouterr().err
    assert f"starting from the completed run {trained.resolve()} a sweep trained, hard-linked into {copy}" in said
    assert not [*workdir.rglob(".init-*.lock"), *workdir.rglob(".start-*.lock"), *workdir.rglob(".sharing-*")]

    again = _child(workdir / "runs")  # the next run finds it in its own output dir
    starting_point.resolve_init_from(again)
    assert again["model"]["name_or_path"] == str(copy.resolve())
    assert f"starting from its completed run {copy}" in capsys.readouterr().err


@pytest.mark.parametrize("differs", ["hash", "seed", "data"])
def test_a_sweeps_starting_point_of_another_config_seed_or_data_is_not_linked(workdir, differs):
    child = _child(workdir / "runs")
    wanted = _parent_hash(child)
    _completed_run(workdir / SWEEP_ROOT / "quickstart" / "runs", "0" * len(wanted) if differs == "hash" else wanted,
                   seed=1 if differs == "seed" else 0,
                   data={"train": "other rows", "eval": "other rows"} if differs == "data" else None)
    with pytest.raises(_Trained):
        starting_point.resolve_init_from(child)
    assert not (workdir / "runs" / RUN_NAME).exists()


def test_a_run_inside_the_sweep_root_is_left_to_its_sweep(workdir):
    """A trial, or the process a sweep trains its starting point in (holding the lock a share would take)."""
    child = _child(workdir / SWEEP_ROOT / "mine" / "runs")
    _completed_run(workdir / SWEEP_ROOT / "other" / "runs", _parent_hash(child))
    with pytest.raises(_Trained):
        starting_point.resolve_init_from(child)


def test_a_single_run_waits_for_a_sweep_training_the_same_starting_point(workdir, capsys):
    child = _child(workdir / "runs")
    parent_hash = _parent_hash(child)
    sweep_runs = workdir / SWEEP_ROOT / "quickstart" / "runs"
    sweep_runs.mkdir(parents=True)
    held = threading.Event()

    def sweep_training() -> None:
        with start_lock(workdir / SWEEP_ROOT, parent_hash, 0):
            held.set()
            time.sleep(1.0)
            _completed_run(sweep_runs, parent_hash)

    thread = threading.Thread(target=sweep_training)
    thread.start()
    assert held.wait(30)
    try:
        starting_point.resolve_init_from(child)
    finally:
        thread.join()
    assert child["model"]["name_or_path"] == str((workdir / "runs" / RUN_NAME).resolve())
    assert "waiting for a sweep training the same starting point" in capsys.readouterr().err


def test_a_read_only_sweep_root_is_searched_without_its_lock(workdir, monkeypatch):
    """The lock file cannot be made there (sweep results copied from elsewhere): the run used to fail on it."""
    from klear_lab import start_sharing

    child = _child(workdir / "runs")
    _completed_run(workdir / SWEEP_ROOT / "quickstart" / "runs", _parent_hash(child))
    monkeypatch.setattr(start_sharing.os, "access", lambda path, mode: False)
    monkeypatch.setattr(start_sharing, "start_lock", lambda *args: pytest.fail("took the lock"))
    starting_point.resolve_init_from(child)
    assert child["model"]["name_or_path"] == str((workdir / "runs" / RUN_NAME).resolve())


def test_the_dry_run_names_the_sweeps_starting_point_it_would_share(workdir):
    """``--dry-run`` predicts what the run does: share the sweep's completed starting point, not train it."""
    from klear_lab.dry_run import init_from_rows

    child = _child(workdir / "runs")
    ((_, before),) = init_from_rows(child)
    assert "first TRAINS IT" in before
    trained = _completed_run(workdir / SWEEP_ROOT / "quickstart" / "runs", _parent_hash(child))
    ((_, row),) = init_from_rows(child)
    assert f"the completed run {trained.resolve()} a sweep trained" in row and "TRAINS" not in row
    assert not (workdir / "runs" / RUN_NAME).exists()  # a dry run links nothing
    ((_, inside),) = init_from_rows(_child(workdir / SWEEP_ROOT / "other" / "runs"))
    assert "first TRAINS IT" in inside  # a sweep's own trial is left to its sweep's sharing


def test_a_copy_left_half_made_by_a_killed_share_is_no_run(workdir):
    """A share killed mid-copy (SIGKILL, OOM) leaves ``.sharing-*``: with run.json copied, it would pass for
    the completed starting point, and be the newest."""
    child = _child(workdir / "runs")
    _completed_run(workdir / "runs" / ".sharing-abc123", _parent_hash(child), name="run")
    _completed_run(workdir / "runs", _parent_hash(child), name=".sharing-parent-4242")
    assert starting_point.find_completed_run(workdir / "runs", _parent_hash(child), seed=0) is None
    with pytest.raises(_Trained):
        starting_point.resolve_init_from(child)


def test_a_starting_point_with_the_longest_name_a_run_may_have_is_shared(workdir):
    child = _child(workdir / "runs")
    name = "p" * 240 + "-s0"  # a run directory name may take 255 bytes: the copy's own name adds nothing
    trained = _completed_run(workdir / SWEEP_ROOT / "quickstart" / "runs", _parent_hash(child), name=name)
    starting_point.resolve_init_from(child)
    assert child["model"]["name_or_path"] == str((workdir / "runs" / name).resolve()) and trained.is_dir()


def test_a_run_whose_name_starts_with_a_dot_is_still_a_run(workdir):
    """``run.name=.scratch`` is accepted: only a share's ``.sharing-*`` copies are no runs."""
    child = _child(workdir / "runs")
    run = _completed_run(workdir / "runs", _parent_hash(child), name=".scratch-20250101-000000-abcdef-s0")
    assert starting_point.find_completed_run(workdir / "runs", _parent_hash(child), seed=0) == run


def test_a_copy_made_where_hard_links_fail_is_called_a_copy(workdir, capsys, monkeypatch):
    """Across file systems (or ``protected_hardlinks``) the share copies every file: its line said hard-linked."""
    import os

    def no_link(src, dst):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_link)
    child = _child(workdir / "runs")
    trained = _completed_run(workdir / SWEEP_ROOT / "quickstart" / "runs", _parent_hash(child))
    starting_point.resolve_init_from(child)
    copy = workdir / "runs" / RUN_NAME
    assert (copy / "model" / "model.safetensors").read_bytes() == b"weights"
    assert f"the completed run {trained.resolve()} a sweep trained, copied into {copy}" in capsys.readouterr().err


def test_the_copy_leaves_out_the_sweeps_wandb_run(workdir):
    """The copy held the source's offline W&B run, id and all: `wandb sync` of both uploaded one run twice."""
    child = _child(workdir / "runs")
    trained = _completed_run(workdir / SWEEP_ROOT / "quickstart" / "runs", _parent_hash(child))
    (trained / "wandb" / "offline-run-20250101_000000-abc123").mkdir(parents=True)
    (trained / "model" / "wandb").mkdir()  # only the run's own W&B directory is left out
    starting_point.resolve_init_from(child)
    copy = workdir / "runs" / RUN_NAME
    assert not (copy / "wandb").exists() and (copy / "model" / "wandb").is_dir()
    assert (trained / "wandb" / "offline-run-20250101_000000-abc123").is_dir()  # the source keeps it


def test_a_share_whose_data_cannot_be_read_here_says_it_was_not_checked(workdir):
    """A corpus deleted after training: the sweep's run is shared unchecked, as a run of the output dir's own is
    used, and with the same warning (the share said nothing)."""
    data = workdir / "corpus.jsonl"
    data.write_text('{"prompt": "What is 1+1?", "answer": "2", "response": "\\\\boxed{2}"}\n')
    (workdir / "parent.yaml").write_text(yaml.safe_dump({**TINY_PARENT, "data": {
        **TINY_PARENT["data"], "sources": [{"name": "file", "path": str(data)}]}}))
    child = _child(workdir / "runs")
    trained = _completed_run(workdir / SWEEP_ROOT / "quickstart" / "runs", _parent_hash(child),
                             data={"train": "the rows then"})
    data.unlink()
    said = (re.escape(f"model.init_from parent.yaml: its data cannot be read here to check that the completed run "
                      f"{trained.resolve()} trained on it (") + r".*corpus\.jsonl.*\); sharing that run")
    with pytest.warns(UserWarning, match=said):
        starting_point.resolve_init_from(child)
    assert child["model"]["name_or_path"] == str((workdir / "runs" / RUN_NAME).resolve())


def test_a_run_in_a_symlinked_runs_links_the_sweeps_starting_point(workdir):
    """``runs`` linked to another disk is still beside the working directory's ``sweep_runs`` (the sweeps were
    looked for beside the link's target, and never found)."""
    elsewhere = workdir / "disk" / "runs"
    elsewhere.mkdir(parents=True)
    (workdir / "runs").symlink_to(elsewhere)
    child = _child(Path("runs"))
    _completed_run(workdir / SWEEP_ROOT / "quickstart" / "runs", _parent_hash(child))
    starting_point.resolve_init_from(child)
    assert (elsewhere / RUN_NAME / "run.json").is_file()


def test_the_dry_runs_earlier_run_rows_look_for_the_config_the_starting_point_resolves_to(workdir, monkeypatch):
    """A run from ``model.init_from`` is named by its resolved ``model.name_or_path``, which a dry run leaves
    unset: looked up with it unset, the dry run never found the run's earlier stopped runs (a review)."""
    from klear_lab import resume
    from klear_lab.dry_run_twins import earlier_run_rows

    asked: list[str] = []
    monkeypatch.setattr(resume, "resumable_twins", lambda cfg: asked.append(cfg["model"]["name_or_path"]) or [])
    child = _child(workdir / "runs")
    assert earlier_run_rows(child) == [] and asked == []  # its starting point is trained first: no such run yet
    swept = _completed_run(workdir / SWEEP_ROOT / "quickstart" / "runs", _parent_hash(child))
    earlier_run_rows(child)
    assert asked == [str((workdir / "runs" / swept.name).resolve())]  # where the sweep's is hard-linked at the start
    own = _completed_run(workdir / "runs", _parent_hash(child), name="parent-20260101-000000-abcdef-s0")
    earlier_run_rows(child)
    assert asked[-1] == str(own.resolve()) and child["model"]["name_or_path"] is None


def test_a_bad_row_of_the_starting_points_data_says_whose_run_read_it(workdir, monkeypatch, capsys):
    """The error named the file and row only; the line before it said a starting point was being trained."""
    from klear_lab.cli import main

    monkeypatch.undo()  # the real _train_parent: it fails on the data before anything trains
    monkeypatch.chdir(workdir)
    data = workdir / "bad.jsonl"
    data.write_text('{"answer": "2", "response": "2"}\n')
    (workdir / "parent.yaml").write_text(yaml.safe_dump({**TINY_PARENT, "data": {
        **TINY_PARENT["data"], "sources": [{"name": "file", "path": str(data)}]}}))
    assert main(["train", "child.yaml", "trainer.num_threads=1"]) == 2
    err = capsys.readouterr().err
    assert f"{data}: row 1: field 'prompt': missing (the row's columns: answer, response; " in err, err
    assert "`fields: {prompt: COLUMN}`) (while training the starting point (model.init_from " in err, err
    assert "parent.yaml); alone: klear-lab train " in err
