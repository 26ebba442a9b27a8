"""A sweep directory moved or copied elsewhere is the sweep there, and the advice to run a sweep again
continues the study it is given for (``klear_lab.sweep.locate``).

A user's report: ``klear-lab compare`` of a moved sweep directory said "no study 'tiny' in
sqlite:////OLD/study.db; start it with klear-lab sweep ...", a copy read the original's study, and a
sweep run with ``--name``/``--out-dir`` was advised ``klear-lab sweep SPEC``, which continues another study.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
from optuna.trial import TrialState
from sweep_fixtures import write_spec

from klear_lab.cli_sweep import main
from klear_lab.errors import ConfigError
from klear_lab.sweep.checks import check_spec
from klear_lab.sweep.launch import freeze_spec
from klear_lab.sweep.locate import continue_command, locate, recorded_sweep, rerun_command, same_sweep
from klear_lab.sweep.queue import prepare_study
from klear_lab.sweep.spec import load_spec
from klear_lab.sweep.storage import StudyLock, default_storage_url, open_study, own_study_url


def ran_sweep(tmp: Path, name: str | None = None, out_dir: Path | None = None, **spec_keys) -> Path:
    """The sweep directory of the toy spec (3 arms x 1 seed) as ``klear-lab sweep toy.yaml [--name N]
    [--out-dir D]`` leaves it, with no trial run: every point queued, lr=0.001 complete (val/acc 0.1)."""
    spec = load_spec(write_spec(tmp, **spec_keys), name=name)
    if out_dir is not None:
        spec.out_dir = out_dir
    url = default_storage_url(spec)
    study, _ = prepare_study(open_study(spec, url, create=True), spec, check_spec(spec), StudyLock(url, spec.name))
    freeze_spec(spec, url)
    complete(study, "lr=0.001", 0.1)
    return spec.sweep_dir


def complete(study, arm: str, value: float) -> None:
    """Finish the queued trial of ``arm`` with ``value`` as its objective, as a trial process does."""
    (trial,) = [t for t in study.get_trials() if t.user_attrs["arm"] == arm and t.state == TrialState.WAITING]
    storage = study._storage
    storage.set_trial_state_values(trial._trial_id, TrialState.RUNNING)
    storage.set_trial_user_attr(trial._trial_id, "metrics", {"val/acc": value})
    storage.set_trial_state_values(trial._trial_id, TrialState.COMPLETE, values=[value])


def compared(sweep_dir: Path, capsys) -> str:
    assert main(["compare", str(sweep_dir)]) == 0, capsys.readouterr().err
    return (sweep_dir / "compare" / "table.csv").read_text()


def continues(command: str, capsys) -> str | None:
    """The study ``command`` (``klear-lab sweep ...``) continues, if it continues one with a trial complete
    (its --validate-only says so), else None."""
    assert main([*shlex.split(command)[1:], "--validate-only"]) == 0, capsys.readouterr().err
    found = re.search(r"note: study '(\S+)' exists \(1 trial\(s\) complete\)", capsys.readouterr().out)
    return found and found.group(1)


def test_a_moved_sweep_compares_its_own_study(tmp_path, capsys):
    sweep_dir = ran_sweep(tmp_path)
    moved = tmp_path / "moved" / sweep_dir.name
    moved.parent.mkdir()
    shutil.move(sweep_dir, moved)
    spec, url = locate(moved)
    assert url == f"sqlite:///{(moved / 'study.db').resolve()}" and spec.sweep_dir == moved.resolve()
    assert "lr=0.001,1," in compared(moved, capsys)  # was: "no study 'toy' in sqlite:///OLD/study.db"


def test_a_copied_sweep_reads_its_own_study_not_the_original(tmp_path, capsys):
    sweep_dir = ran_sweep(tmp_path)
    copy = tmp_path / "copy" / sweep_dir.name
    shutil.copytree(sweep_dir, copy)
    complete(open_study(*locate(sweep_dir), create=False), "lr=0.002", 0.2)  # the original goes on
    assert "lr=0.002,1," in compared(sweep_dir, capsys)
    assert "lr=0.002,0," in compared(copy, capsys)  # the copy's study: lr=0.002 never finished there
    assert locate(copy)[1] == f"sqlite:///{(copy / 'study.db').resolve()}"
    (copy / "sweep.json").unlink()  # it said "no sweep.json / spec.yaml", spec.yaml there
    with pytest.raises(ConfigError, match=r"a sweep directory without its sweep.json \(a sweep writes"):
        locate(copy)
    with pytest.raises(ConfigError, match=r"not a sweep directory \(no sweep.json or spec.yaml\)"):
        locate(tmp_path)


def test_a_storage_the_spec_gave_stays_as_recorded(tmp_path):
    """An SQLite file outside the sweep directory (or a PostgreSQL server) is where the study is, moved or not."""
    shared = f"sqlite:///{tmp_path / 'dbs' / 'studies.db'}"
    sweep_dir = ran_sweep(tmp_path, storage=shared)
    moved = tmp_path / "moved" / sweep_dir.name
    shutil.copytree(sweep_dir, moved)
    assert locate(moved)[1] == locate(sweep_dir)[1] == shared


def test_a_moved_sweep_without_its_study_file_is_not_told_to_start_it(tmp_path, capsys):
    """Its study.db left behind: "start it with `klear-lab sweep MOVED/spec.yaml`" started a new study
    where the sweep once ran."""
    sweep_dir = ran_sweep(tmp_path)
    moved = tmp_path / "moved" / sweep_dir.name
    shutil.copytree(sweep_dir, moved, ignore=shutil.ignore_patterns("study.db*"))
    with pytest.raises(ConfigError, match=rf"{moved}: no study.db in this sweep directory, moved or copied "
                                          rf"without it from {sweep_dir}"):
        locate(moved)
    assert main(["compare", str(moved)]) == 2
    assert "start it" not in capsys.readouterr().err
    shutil.rmtree(sweep_dir)  # the original gone too: a command here would start the study anew
    assert rerun_command(moved) is None
    assert continue_command(moved, "toy.yaml") == (f"(no command continues it from {moved}: the sweep ran in "
                                                   f"{sweep_dir.resolve()})")


def test_the_rerun_of_a_sweep_run_with_name_and_out_dir_keeps_them(tmp_path, capsys):
    other = tmp_path / "other"
    sweep_dir = ran_sweep(tmp_path, name="tintb", out_dir=other)
    command = rerun_command(sweep_dir)
    assert command == f"klear-lab sweep {tmp_path / 'toy.yaml'} --name tintb --out-dir {other}"
    assert continues(command, capsys) == "tintb"
    assert continues(f"klear-lab sweep {tmp_path / 'toy.yaml'}", capsys) is None  # what it said before


def test_the_rerun_of_a_plain_sweep_is_its_spec(tmp_path, capsys):
    sweep_dir = ran_sweep(tmp_path)
    assert rerun_command(sweep_dir) == f"klear-lab sweep {tmp_path / 'toy.yaml'}"
    moved = tmp_path / "moved" / sweep_dir.name
    shutil.copytree(sweep_dir, moved)  # (a copy: the original's study would otherwise be lost to the check)
    assert rerun_command(moved) == f"klear-lab sweep {tmp_path / 'toy.yaml'} --out-dir {moved.parent}"
    assert continues(rerun_command(moved), capsys) == "toy"


def test_without_its_launch_spec_a_sweep_is_rerun_from_its_frozen_spec(tmp_path, capsys):
    """The spec deleted, or edited to another name or storage: the frozen copy holds the study's."""
    sweep_dir = ran_sweep(tmp_path, name="tintb", out_dir=tmp_path / "other")
    (tmp_path / "toy.yaml").unlink()
    assert rerun_command(sweep_dir) == f"klear-lab sweep {sweep_dir / 'spec.yaml'}"
    assert continues(rerun_command(sweep_dir), capsys) == "tintb"
    assert rerun_command(tmp_path) is None  # not a sweep directory
    moved = tmp_path / "moved" / "tintb"  # and moved: its frozen spec continues it there, not where it ran
    moved.parent.mkdir()
    shutil.move(sweep_dir, moved)
    assert rerun_command(moved) == f"klear-lab sweep {moved / 'spec.yaml'} --out-dir {moved.parent}"
    assert continues(rerun_command(moved), capsys) == "tintb"
    assert not sweep_dir.exists()  # (its validation made nothing at the old place)


def test_a_launch_spec_edited_into_another_sweep_is_not_the_rerun(tmp_path, capsys):
    """An axis value added to the launch spec since the sweep ran, or another experiment: its advice,
    ``klear-lab sweep SPEC``, continued the study as another sweep (widened, or on another base); the frozen
    spec continues the sweep that ran. An edit that leaves the sweep as it was keeps the launch spec."""
    sweep_dir = ran_sweep(tmp_path)
    spec_path, frozen = tmp_path / "toy.yaml", f"klear-lab sweep {sweep_dir / 'spec.yaml'}"
    original = spec_path.read_text()
    write_spec(tmp_path, lrs=(0.001, 0.002, 0.003, 0.004))
    assert same_sweep(load_spec(spec_path), recorded_sweep(sweep_dir)[1]) == "axes"
    assert rerun_command(sweep_dir) == frozen
    assert continues(rerun_command(sweep_dir), capsys) == "toy"
    (tmp_path / "other.yaml").write_text("run: {name: toy, kind: sft}\nsft: {max_steps: 3}\n")
    spec_path.write_text(original.replace("experiment: exp.yaml", "experiment: other.yaml"))
    assert same_sweep(load_spec(spec_path), recorded_sweep(sweep_dir)[1]) == "experiment"
    assert rerun_command(sweep_dir) == frozen
    spec_path.write_text(original.replace("seeds:\n- 0", "seeds:\n- 0\n- 1"))
    assert same_sweep(load_spec(spec_path), recorded_sweep(sweep_dir)[1]) == "seeds"
    spec_path.write_text(original + "description: the same sweep, described\n")
    assert rerun_command(sweep_dir) == f"klear-lab sweep {spec_path}"


def test_the_study_url_of_a_sweep_directory_is_built_in_one_place(tmp_path):
    """``locate`` of a moved sweep and a spec without ``storage`` name the study file as ``own_study_url`` does."""
    sweep_dir = ran_sweep(tmp_path)
    assert default_storage_url(load_spec(tmp_path / "toy.yaml")) == own_study_url(sweep_dir)
    moved = tmp_path / "moved" / sweep_dir.name
    shutil.copytree(sweep_dir, moved)
    assert locate(moved)[1] == own_study_url(moved) == f"sqlite:///{(moved / 'study.db').resolve()}"


def test_a_launch_spec_edited_past_loading_is_not_a_traceback_in_runs(tmp_path):
    """A storage URL edited into something SQLAlchemy cannot parse raised from the advice, so ``klear-lab
    runs`` of the sweep's runs crashed (exit 1)."""
    sweep_dir = ran_sweep(tmp_path)
    (tmp_path / "toy.yaml").write_text((tmp_path / "toy.yaml").read_text() + "storage: 'not a url'\n")
    assert rerun_command(sweep_dir) == f"klear-lab sweep {sweep_dir / 'spec.yaml'}"  # the frozen one instead


def test_runs_advise_the_command_that_continues_the_trials_sweep(tmp_path):
    """A killed trial of ``klear-lab sweep toy.yaml --name tintb --out-dir other`` was advised ``klear-lab sweep
    toy.yaml`` by ``klear-lab runs other``: the study 'toy' in out/, not its own."""
    import json

    from klear_lab.run_list import list_runs

    other = tmp_path / "other"
    sweep_dir = ran_sweep(tmp_path, name="tintb", out_dir=other)
    run_dir = sweep_dir / "runs" / "tintb-lr-0.002-s0"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"status": "failed", "error": "interrupted (Ctrl-C)",
                                                  "tags": ["kind:sft", "seed:0"]}))
    (row,) = list_runs([other])
    assert row.note == (f"interrupted (Ctrl-C) -> sweep trial: run the sweep again: klear-lab sweep "
                        f"{tmp_path / 'toy.yaml'} --name tintb --out-dir {other}")


def test_a_moved_sweep_reads_the_metrics_its_own_runs_logged(tmp_path, capsys):
    """A metric the study does not hold is read from the trial's metrics.csv: from the recorded run
    directory, gone once the sweep moved, so the moved sweep's table lost it (and its curves)."""
    sweep_dir = ran_sweep(tmp_path)
    study = open_study(*locate(sweep_dir), create=False)
    run_dir = sweep_dir / "runs" / "toy-lr-0.002-s0"
    (run_dir / "csv").mkdir(parents=True)
    (run_dir / "csv" / "metrics.csv").write_text("step,train/loss\n0,0.75\n1,0.625\n")
    (trial,) = [t for t in study.get_trials() if t.user_attrs["arm"] == "lr=0.002"]
    study._storage.set_trial_state_values(trial._trial_id, TrialState.RUNNING)
    study._storage.set_trial_user_attr(trial._trial_id, "run_dir", str(run_dir))
    study._storage.set_trial_user_attr(trial._trial_id, "metrics", {"val/acc": 0.2})
    study._storage.set_trial_state_values(trial._trial_id, TrialState.COMPLETE, values=[0.2])
    moved = tmp_path / "moved" / sweep_dir.name
    moved.parent.mkdir()
    shutil.move(sweep_dir, moved)
    table = compared(moved, capsys)
    assert "0.625" in next(row for row in table.splitlines() if row.startswith("lr=0.002,")), table


def test_a_copied_sweep_continues_and_supersedes_its_own_runs_not_the_originals(tmp_path, monkeypatch):
    """Continuing a copy (as its advice says) took a killed trial's recorded run directory, the
    original's: its retry resumed training there, or marked the original's run superseded."""
    from klear_lab.sweep.retry import resumable_run, superseded_runs
    from klear_lab.sweep.run_status import RUN_DIR_ATTR

    sweep_dir = ran_sweep(tmp_path)
    study = open_study(*locate(sweep_dir), create=False)
    (killed,) = [t for t in study.get_trials() if t.user_attrs["arm"] == "lr=0.002"]
    original_run = sweep_dir / "runs" / "toy-lr-0.002-a"
    original_run.mkdir(parents=True)
    study._storage.set_trial_state_values(killed._trial_id, TrialState.RUNNING)
    study._storage.set_trial_user_attr(killed._trial_id, RUN_DIR_ATTR, str(original_run))
    study._storage.set_trial_state_values(killed._trial_id, TrialState.FAIL)
    copy = tmp_path / "copy" / sweep_dir.name
    shutil.copytree(sweep_dir, copy)
    spec, url = locate(copy)
    copied = open_study(spec, url, create=False)
    retry = copied._storage.create_new_trial(copied._study_id)
    copied._storage.set_trial_user_attr(retry, "point", killed.user_attrs["point"])
    looked_in = []

    def no_checkpoint(run_dir):
        looked_in.append(run_dir)
        raise ConfigError(f"{run_dir}: no checkpoint")

    monkeypatch.setattr("klear_lab.resume.resume_config", no_checkpoint)
    assert resumable_run(copied, spec, retry, spec.compose()) is None
    assert looked_in == [str(spec.runs_dir / "toy-lr-0.002-a")]  # the copy's run, not the original's
    copied._storage.set_trial_user_attr(retry, RUN_DIR_ATTR, str(copy / "runs" / "toy-lr-0.002-b"))
    ((old, new, _),) = superseded_runs(copied, spec, retry)
    assert (old, new) == (str(spec.runs_dir / "toy-lr-0.002-a"), str(copy / "runs" / "toy-lr-0.002-b"))
    assert Path(old).resolve().is_relative_to(copy.resolve())
    shutil.rmtree(spec.runs_dir / "toy-lr-0.002-a")  # the copy lost the run: gone, not the original's
    looked_in.clear()
    assert resumable_run(copied, spec, retry, spec.compose()) is None
    assert looked_in == [str(spec.runs_dir / "toy-lr-0.002-a")]  # (resume_config: "not a run directory")
    assert spec.own_run_dir(str(original_run)) == str(spec.runs_dir / "toy-lr-0.002-a") and original_run.is_dir()
