"""A resumed run's ``run.json``: a damaged one stops ``klear-lab resume`` with an error naming the file (exit 2),
not a traceback; each attempt's code commit is recorded."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from klear_lab import git_state, tracking
from klear_lab.attempts import saved_identity, warn_if_elsewhere
from klear_lab.cli import main
from klear_lab.config.compose import compose
from klear_lab.errors import ConfigError
from klear_lab.resume import check_resumable, checkpoint_path, resumable_twins
from klear_lab.tracking import create_run_dir, write_config

SFT = str(Path(__file__).resolve().parents[3] / "experiments/quickstart/sft.yaml")


@pytest.mark.parametrize("text", ['{"status": "failed", "config_ha', "[1, 2]", '"failed"'])
def test_a_damaged_run_json_is_a_config_error_naming_it(tmp_path, capsys, text):
    cfg = compose(SFT, [f"run.out_dir={tmp_path}"])
    run_dir = create_run_dir(cfg)
    write_config(run_dir, cfg)
    (run_dir / "run.json").write_text(text)
    capsys.readouterr()
    assert main(["resume", str(run_dir)]) == 2
    assert f"{run_dir / 'run.json'}: " in capsys.readouterr().err
    for read in (lambda: check_resumable(run_dir, cfg), lambda: saved_identity(run_dir)):  # the API's path
        with pytest.raises(ConfigError, match="run.json"):
            read()


def stopped_run(tmp_path: Path) -> tuple[dict, Path]:
    """A stopped SFT run as ``klear-lab resume`` finds it, with a small checkpoint that loads (no training)."""
    import torch

    cfg = compose(SFT, [f"run.out_dir={tmp_path}"])
    run_dir = create_run_dir(cfg)
    write_config(run_dir, cfg)
    (run_dir / "run.json").write_text(json.dumps({**tracking.identity_of(cfg, run_dir), "status": "failed"}))
    checkpoint_path(run_dir).parent.mkdir()
    loops = {"loops": {"fit_loop": {"epoch_loop.state_dict": {"_batches_that_stepped": 4}}}}
    torch.save({**loops, "state_dict": {"w": torch.zeros(20_000)}}, checkpoint_path(run_dir))
    check_resumable(run_dir, cfg)  # a whole checkpoint: the run directory built here resumes
    return cfg, run_dir


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "not lightning"])
def test_a_checkpoint_that_cannot_load_is_a_config_error_naming_it(tmp_path, capsys, damage):
    """A corrupt, cut short or empty ``last.ckpt`` ended ``klear-lab resume`` with torch's traceback (exit 1) once
    the run's data and model were built, and left ``.lock`` in the run directory."""
    import torch

    cfg, run_dir = stopped_run(tmp_path)
    ckpt = checkpoint_path(run_dir)
    assert resumable_twins(cfg) == [run_dir]
    if damage == "garbage":
        ckpt.write_text("garbage\n")
    elif damage == "truncated":
        with ckpt.open("r+b") as f:
            f.truncate(ckpt.stat().st_size // 2)
    elif damage == "empty":
        ckpt.write_bytes(b"")
    else:
        torch.save({"state_dict": {"w": torch.zeros(2)}}, ckpt)
    record = (run_dir / "run.json").read_text()
    capsys.readouterr()
    assert main(["resume", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"klear-lab: error: {ckpt}: cannot load the checkpoint (corrupt or truncated: "), err
    assert f"start a new run: klear-lab train {run_dir / 'config.yaml'}" in err and "Traceback" not in err
    assert len(err.splitlines()) == 1 and "torch.save your checkpoint" not in err  # torch's advice, cut
    assert not (run_dir / ".lock").exists() and (run_dir / "run.json").read_text() == record
    with pytest.raises(ConfigError, match="last.ckpt: cannot load the checkpoint"):  # the API's and sweeps' path
        check_resumable(run_dir, cfg)
    assert resumable_twins(cfg) == []  # a new run of the config no longer points at it


def test_a_metrics_csv_that_cannot_be_read_is_a_config_error_naming_it(tmp_path, capsys):
    """Bytes that are not UTF-8 in ``csv/metrics.csv`` ended ``klear-lab resume`` with a UnicodeDecodeError
    traceback once the run's data and model were built (where the rows after the checkpoint are set aside)."""
    cfg, run_dir = stopped_run(tmp_path)
    metrics = run_dir / "csv" / "metrics.csv"
    metrics.parent.mkdir()
    metrics.write_text("step,train/loss\n0,1.5\n")
    check_resumable(run_dir, cfg)
    metrics.write_bytes(b"step,train/loss\n0,1.5\n\xff\n")
    capsys.readouterr()
    assert main(["resume", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"klear-lab: error: {metrics}: cannot read the run's logged metrics ('utf-8' codec"), err
    assert f"start a new run: klear-lab train {run_dir / 'config.yaml'}" in err and "Traceback" not in err
    assert not (run_dir / ".lock").exists() and metrics.read_bytes().endswith(b"\xff\n")


@pytest.mark.parametrize(("edit", "says"), [
    ({"attempts": "two"}, "attempts is 'two', not a count of 1 or more"),
    ({"attempts": 0}, "attempts is 0, not a count of 1 or more"),
    ({"status": "paused"}, "status is 'paused', not one a run writes"),
    ({"status": None}, "status is None, not one a run writes"),
    ({"config_hash": None}, "no config_hash (got None)"),
])
def test_a_hand_edited_run_json_is_refused_naming_the_key(tmp_path, capsys, edit, says):
    """``attempts: "two"`` ended a resume in a ValueError traceback once the run was built; an unknown or
    missing status was resumed as a stopped run; a missing config_hash said "started with None"."""
    cfg, run_dir = stopped_run(tmp_path)
    record = run_dir / "run.json"
    identity = {k: v for k, v in {**json.loads(record.read_text()), **edit}.items() if v is not None}
    record.write_text(json.dumps(identity))
    capsys.readouterr()
    assert main(["resume", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"klear-lab: error: {record}: {says}"), err
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):  # the API's path
        check_resumable(run_dir, cfg)
    assert resumable_twins(cfg) == [] and record.read_text() == json.dumps(identity)


@pytest.mark.parametrize("status", ["running", "pruned"])
def test_a_run_that_died_running_or_was_pruned_still_resumes(tmp_path, status):
    cfg, run_dir = stopped_run(tmp_path)
    record = run_dir / "run.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "status": status, "pid": 2**22 + 1}))
    assert check_resumable(run_dir, cfg).log_step == 4


def test_a_resume_override_that_is_not_key_value_is_said_so(tmp_path, capsys):
    """It was called a key a resumed run may not change, with advice to run a `klear-lab train` that fails too."""
    _, run_dir = stopped_run(tmp_path)
    assert main(["resume", str(run_dir), "notkv"]) == 2
    assert capsys.readouterr().err.startswith(f"klear-lab: error: resume {run_dir}: override 'notkv' must look like "
                                              "key=value")


def test_a_missing_run_directory_says_so(tmp_path, capsys):
    missing = tmp_path / "runs" / "sft-nope"
    assert main(["resume", str(missing)]) == 2
    assert capsys.readouterr().err.startswith(f"klear-lab: error: {missing}: no such directory")
    (tmp_path / "runs").mkdir()
    assert main(["resume", str(tmp_path / "runs")]) == 2
    assert "not a run directory (needs config.yaml and run.json)" in capsys.readouterr().err
    _, run_dir = stopped_run(tmp_path / "lost")
    (run_dir / "config.yaml").unlink()  # `runs` lists it, advising resume: resume names what is gone
    assert main(["resume", str(run_dir)]) == 2
    assert f"{run_dir}: config.yaml is missing (a run directory needs" in capsys.readouterr().err


def test_runs_says_how_many_run_directories_it_could_not_list(tmp_path, capsys):
    """A run that lost its run.json (a checkpoint and config still there) vanished from `runs` without a word."""
    _, kept = stopped_run(tmp_path)
    _, lost = stopped_run(tmp_path)
    (lost / "run.json").unlink()
    assert main(["runs", str(tmp_path)]) == 0
    out = capsys.readouterr()
    assert kept.name in out.out.replace("\n", "") and lost.name not in out.out
    assert f"note: 1 run directory without a run.json not listed (status unknown; the first: {lost})" in out.err
    assert main(["runs", str(kept)]) == 0 and "without a run.json" not in capsys.readouterr().err


def test_each_attempt_records_its_code_commit_and_a_new_one_warns(tmp_path, capsys, monkeypatch):
    """A resumed run kept only its first attempt's git_commit, as if every step had run on that code."""
    first = "1" * 40
    (tmp_path / "run.json").write_text(json.dumps({"git_commit": first, "attempts": 1, "status": "failed"}))
    monkeypatch.setattr(git_state, "git_commit", lambda path=None: first)
    assert saved_identity(tmp_path)["git_commits"] == [first, first]
    assert "warning" not in capsys.readouterr().err
    monkeypatch.setattr(git_state, "git_commit", lambda path=None: "2" * 40)
    identity = saved_identity(tmp_path)
    assert (identity["git_commit"], identity["git_commits"], identity["attempts"]) == (first, [first, "2" * 40], 2)
    assert f"previous attempt ran on {first}" in capsys.readouterr().err
    (tmp_path / "run.json").write_text(json.dumps({**identity, "status": "failed"}))  # a third attempt
    assert saved_identity(tmp_path)["git_commits"] == [first, "2" * 40, "2" * 40]


def test_each_attempt_records_its_software_and_a_change_warns(tmp_path, capsys, monkeypatch):
    """Library versions (and installed plugin packages, whose code is not hashed) were not recorded: a run's
    saved config and seed did not say which torch or plugin version produced its numbers."""
    import importlib.metadata as metadata

    versions = tracking.software_versions()
    assert versions["python"] == ".".join(map(str, sys.version_info[:3]))
    assert versions["torch"] == metadata.version("torch") and versions["klear-lab"] == metadata.version("klear-lab")
    (tmp_path / "run.json").write_text(json.dumps({"attempts": 1, "status": "failed"}))  # from before: none
    assert saved_identity(tmp_path)["software"] == [{}, versions]  # one per attempt: the first's unknown
    assert "other software" not in capsys.readouterr().err
    (tmp_path / "run.json").write_text(json.dumps({"attempts": 1, "status": "failed", "software": [versions]}))
    assert saved_identity(tmp_path)["software"] == [versions, versions]
    assert "other software" not in capsys.readouterr().err
    older = {**versions, "torch": "1.0.0", "plugin:my-clips": "0.1"}
    (tmp_path / "run.json").write_text(json.dumps({"attempts": 2, "status": "failed", "software": [older]}))
    assert saved_identity(tmp_path)["software"] == [older, versions]
    err = capsys.readouterr().err
    assert f"torch 1.0.0 -> {versions['torch']}" in err and "plugin:my-clips 0.1 -> (none)" in err, err


def test_math_verify_dependencies_are_recorded_and_an_older_record_lacking_them_does_not_warn(tmp_path, capsys):
    """math-verify's verdicts depend on sympy and latex2sympy2_extended, which a run did not record (a review);
    a run recorded before them resumes without a warning that they appeared, and a changed sympy warns."""
    import importlib.metadata as metadata

    versions = tracking.software_versions()
    for name in ("sympy", "latex2sympy2_extended", "numpy"):
        assert versions[name] == metadata.version(name)
    older = {k: v for k, v in versions.items() if k not in ("sympy", "latex2sympy2_extended", "numpy")}
    (tmp_path / "run.json").write_text(json.dumps({"attempts": 1, "status": "failed", "software": [older]}))
    assert saved_identity(tmp_path)["software"] == [older, versions]
    assert "other software" not in capsys.readouterr().err
    changed = {**versions, "sympy": "1.0"}
    (tmp_path / "run.json").write_text(json.dumps({"attempts": 1, "status": "failed", "software": [changed]}))
    saved_identity(tmp_path)
    assert f"sympy 1.0 -> {versions['sympy']}" in capsys.readouterr().err


def test_software_lists_installed_plugin_packages(tmp_path, monkeypatch):
    dist = tmp_path / "klear_ext-0.3.1.dist-info"  # an installed package with a klear_lab.plugins entry point
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: klear-ext\nVersion: 0.3.1\n")
    (dist / "entry_points.txt").write_text(f"[{tracking.ENTRY_POINT_GROUP}]\next = klear_ext\n")
    assert "plugin:klear-ext" not in tracking.software_versions()
    monkeypatch.syspath_prepend(str(tmp_path))
    assert tracking.software_versions()["plugin:klear-ext"] == "0.3.1"


def test_run_json_names_the_directory_the_run_started_in_and_a_resume_elsewhere_warns(tmp_path, capsys,
                                                                                      monkeypatch):
    """Relative data paths are read from the working directory, and nothing said which one the run used."""
    started, elsewhere = tmp_path / "proj", tmp_path / "other"
    started.mkdir(), elsewhere.mkdir()
    monkeypatch.chdir(started)
    (started / "data").mkdir()
    (started / "data" / "train.jsonl").write_text('{"prompt": "p", "answer": "1"}\n')
    cfg = compose(None, ["run.out_dir=" + str(tmp_path / "runs")])
    run_dir = create_run_dir(cfg)
    write_config(run_dir, cfg)
    identity = tracking.identity_of(cfg, run_dir)
    assert identity["work_dir"] == str(started)
    (run_dir / "run.json").write_text(json.dumps({**identity, "status": "failed"}))
    warn_if_elsewhere(run_dir)
    assert "resuming from" not in capsys.readouterr().err
    monkeypatch.chdir(elsewhere)
    assert saved_identity(run_dir)["work_dir"] == str(started)
    warn_if_elsewhere(run_dir)  # the embedded world: no path to read from elsewhere
    assert "resuming from" not in capsys.readouterr().err
    file_cfg = compose(None, ["run.out_dir=" + str(tmp_path / "runs"), "run.seed=1", "model.name_or_path=Qwen/Qwen3-8B",
                              "data.sources=[{name: file, path: data/train.jsonl}]"])
    run_dir = create_run_dir(file_cfg)
    write_config(run_dir, file_cfg)
    (run_dir / "run.json").write_text(json.dumps({**identity, "status": "failed"}))
    warn_if_elsewhere(run_dir)
    assert (f"resuming from {elsewhere}; the run started in {started}, and the relative paths in its config.yaml "
            "(data/train.jsonl) are read from the working directory") in capsys.readouterr().err  # not the hub id


def test_a_rerun_elsewhere_of_a_config_with_a_relative_out_dir_says_where_the_new_run_goes(tmp_path, capsys,
                                                                                         monkeypatch):
    """A walkthrough: ``cd /tmp && klear-lab train RUN/config.yaml`` of an embedded-world run said nothing, and
    its relative ``run.out_dir: runs`` put the new run in /tmp/runs. A resume writes in the run's own directory."""
    started, elsewhere = tmp_path / "proj", tmp_path / "other"
    started.mkdir(), elsewhere.mkdir()
    monkeypatch.chdir(started)
    cfg = compose(None, ["run.out_dir=runs"])
    run_dir = create_run_dir(cfg).resolve()
    write_config(run_dir, cfg)
    (run_dir / "run.json").write_text(json.dumps({**tracking.identity_of(cfg, run_dir), "status": "completed"}))
    monkeypatch.chdir(elsewhere)
    warn_if_elsewhere(run_dir, "rerunning its saved config")
    assert f"(run.out_dir runs: the new run goes to {elsewhere / 'runs'})" in capsys.readouterr().err
    warn_if_elsewhere(run_dir)
    assert "resuming from" not in capsys.readouterr().err


def test_a_moved_run_resumed_records_its_new_directory(tmp_path, monkeypatch):
    """``run.json``'s ``run_dir`` named where the run started after it was moved and resumed (a review)."""
    moved = tmp_path / "moved"
    moved.mkdir()
    (moved / "run.json").write_text(json.dumps({"status": "failed", "run_dir": "/old/place/run"}))
    assert saved_identity(moved)["run_dir"] == str(moved.resolve())
    (moved / "run.json").write_text(json.dumps({"status": "failed", "run_dir": "moved"}))  # the same, relative
    monkeypatch.chdir(tmp_path)
    assert saved_identity(Path("moved"))["run_dir"] == "moved"


def test_relative_paths_are_the_files_a_run_reads():
    """The other-directory warning names the files a run of the config reads, by the builders' own rule: a
    training source's ``eval_path`` is not read (held-out data comes from ``data.eval_sources``), nor an eval
    run's training sources (it copied that rule, and named both)."""
    from klear_lab.attempts import relative_paths

    def cfg(kind):
        return {"run": {"kind": kind}, "model": {"name_or_path": "out/sft"},
                "data": {"sources": [{"name": "file", "path": "d/train.jsonl", "eval_path": "d/unread.jsonl"},
                                     {"name": "world"}],
                         "eval_sources": [{"name": "file", "path": "d/all.jsonl", "eval_path": "d/test.jsonl"},
                                          {"name": "file", "path": "/abs/test.jsonl"}]}}

    assert relative_paths(cfg("rl")) == ["d/train.jsonl", "d/test.jsonl", "out/sft"]
    assert relative_paths(cfg("eval")) == ["d/test.jsonl", "out/sft"]


def test_the_other_directory_warning_comes_before_the_data_is_read(tmp_path, capsys, monkeypatch):
    """A resume from elsewhere fails on its first relative data path, in ``prepare``: the warning came after
    it (in ``saved_identity``), so it never explained that error (a review)."""
    from klear_lab.run import _run

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"status": "failed", "work_dir": str(tmp_path / "proj")}))
    (run_dir / "config.yaml").write_text(json.dumps({"data": {"sources": [{"name": "file", "path": "data/x.jsonl"}]},
                                                     "model": {"name_or_path": None}}))
    monkeypatch.chdir(tmp_path)

    def prepare(cfg):
        raise ConfigError("data.sources.0.path: no such file under the working directory")

    with pytest.raises(ConfigError, match="no such file"):
        _run(compose(None), prepare, None, run_dir, None)
    assert f"the run started in {tmp_path / 'proj'}" in capsys.readouterr().err


def test_a_damaged_earlier_run_directory_does_not_stop_a_new_run(tmp_path):
    """``resumable_twins`` reads the earlier runs of a config to name one to resume; a broken config.yaml
    there raised a YAML error before the new run started (a review)."""
    from klear_lab.resume import resumable_twins

    cfg = compose(None, ["run.out_dir=" + str(tmp_path)])
    twin = tmp_path / tracking.run_dir_name(cfg, "20260101-000000")
    twin.mkdir()
    (twin / "run.json").write_text(json.dumps({"status": "failed"}))
    for text in ("run: [unclosed", "- a list\n"):
        (twin / "config.yaml").write_text(text)
        assert resumable_twins(cfg) == []


def test_a_resume_keeps_the_rows_up_to_its_checkpoint_and_the_evaluation_after_it():
    """An evaluation is logged at the steps done, one past its update's training row (Lightning's 0-based
    index, the checkpoint's logging step): the resume does not repeat it, so its row stays; the next
    update's training row at that step is logged again and goes."""
    from klear_lab.resume import _before_checkpoint

    train = {"step": "4", "train/loss": "0.5", "val/acc": ""}
    evaluation = {"step": "4", "train/loss": "", "val/acc": "1"}
    assert _before_checkpoint(evaluation, 3) and not _before_checkpoint(train, 3)
    assert _before_checkpoint(train, 4) and _before_checkpoint(evaluation, 4)
    assert not _before_checkpoint(evaluation, 2) and _before_checkpoint({"step": "", "x": "1"}, 0)
    # a checkpoint of an older version, which logged an evaluation at its update's training row: one a step
    # past the checkpoint is the next update's, and the resume logs it again
    assert not _before_checkpoint(evaluation, 3, eval_after=False) and _before_checkpoint(evaluation, 4, False)
