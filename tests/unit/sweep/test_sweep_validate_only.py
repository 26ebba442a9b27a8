"""``sweep --validate-only`` says what the run would meet (found by a fresh-user review): a storage the run cannot
open or create (it said OK, the run then stopped with exit 2), and the models and rollout engines this machine
lacks, noted as ``train --dry-run`` marks them (it noted only the missing data)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess

import pytest
from sweep_fixtures import REPO, sweep_cmd, write_spec

from klear_lab.cli_sweep import main
from klear_lab.sweep.checks import check_spec
from klear_lab.sweep.queue import prepare_study
from klear_lab.sweep.spec import load_spec
from klear_lab.sweep.storage import StudyLock, default_storage_url, open_study


def _error(argv, capsys) -> str:
    assert main(argv) == 2
    return capsys.readouterr().err


def test_a_database_server_this_machine_cannot_reach_is_a_note_of_validate_only_and_stops_the_run(tmp_path, capsys):
    """As missing data or models: the spec may be meant for a cluster's server. The run stops at once."""
    spec = str(write_spec(tmp_path, storage="postgresql://nobody@127.0.0.1:1/x"))
    assert main(["sweep", spec, "--validate-only"]) == 0
    out = capsys.readouterr().out
    said = "storage postgresql://nobody@127.0.0.1:1/x: cannot connect: "
    assert f"note: {said}" in out and "a sweep run here would stop at once" in out, out
    assert said in _error(["sweep", spec], capsys)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("storage", "said"), [
    ("sqlite:////proc/klear-nope/study.db", "cannot create /proc/klear-nope for the study's SQLite file "
                                            "(sqlite:////proc/klear-nope/study.db): No such file or directory"),
    ("sqlite:////proc/klear-nope.db", "cannot open /proc/klear-nope.db.lock, the lock beside the study's SQLite file"),
])
def test_a_storage_the_run_cannot_open_is_refused_by_validate_only_as_by_the_run(tmp_path, capsys, storage, said):
    spec = str(write_spec(tmp_path, storage=storage))
    validated = _error(["sweep", spec, "--validate-only"], capsys)
    assert said in validated, validated
    assert _error(["sweep", spec], capsys) == validated  # the run's own words
    assert not (tmp_path / "out").exists()


def test_an_out_dir_that_cannot_be_made_is_refused_by_validate_only_as_by_the_run(tmp_path, capsys):
    spec = str(write_spec(tmp_path))
    validated = _error(["sweep", spec, "--validate-only", "--out-dir", "/proc/klear-x"], capsys)
    assert "--out-dir /proc/klear-x: cannot write the sweep directory /proc/klear-x/toy there: No such file or " \
           "directory" in validated, validated
    assert _error(["sweep", spec, "--out-dir", "/proc/klear-x"], capsys) == validated
    other = str(write_spec(tmp_path, name="other", storage=f"sqlite:///{tmp_path / 'db' / 'study.db'}"))
    assert "cannot write the sweep directory" in _error(["sweep", other, "--out-dir", "/proc/klear-x"], capsys)
    assert not (tmp_path / "db").exists()  # refused before the study (it ended in a traceback after it)


def test_a_study_not_made_yet_is_fine_and_validate_only_makes_nothing(tmp_path, capsys):
    db = tmp_path / "dbs" / "deeper" / "study.db"
    for spec in (write_spec(tmp_path), write_spec(tmp_path, name="own", storage=f"sqlite:///{db}")):
        assert main(["sweep", str(spec), "--validate-only"]) == 0, capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not (tmp_path / "dbs").exists()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap makes the read-only mount")
def test_a_read_only_sweep_directory_is_refused_by_validate_only_as_by_the_run(tmp_path):
    path = write_spec(tmp_path)
    spec = load_spec(path)
    url = default_storage_url(spec)
    prepare_study(open_study(spec, url, create=True), spec, check_spec(spec), StudyLock(url, spec.name))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    said = []
    for argv in (["--validate-only"], []):
        done = subprocess.run(["bwrap", "--bind", "/", "/", "--ro-bind", str(spec.sweep_dir), str(spec.sweep_dir),
                               "--dev", "/dev", "--proc", "/proc", *sweep_cmd(path, *argv)], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 2, done.stderr[-2000:]
        said.append(done.stderr)
    assert f"cannot write the sweep directory {spec.sweep_dir} there: Read-only file system" in said[0], said[0]
    assert said[0] == said[1]


def test_models_and_engines_this_machine_lacks_are_noted_once_each(tmp_path, capsys):
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    spec = write_spec(tmp_path, lrs=(0.001, 0.002, 0.003), axes={
        "optim.lr": [0.001, 0.002], "model.name_or_path": ["nobody/klear-no-such-a", "nobody/klear-no-such-b"]})
    argv = ["sweep", str(spec), "--validate-only", "eval.engine=rollout", "rl.rollout.name=vllm"]
    assert main(argv) == 0, capsys.readouterr().err  # the spec may be meant for another machine
    out = capsys.readouterr().out
    models = [line for line in out.splitlines() if line.startswith("note: models this machine cannot load")]
    assert len(models) == 1 and models[0].count("NOT AVAILABLE HERE: HF_HUB_OFFLINE is set") == 2, out
    assert "nobody/klear-no-such-a (NOT AVAILABLE HERE" in models[0] and "nobody/klear-no-such-b (" in models[0]
    engines = [line for line in out.splitlines() if line.startswith("note: rollout engines this machine cannot")]
    assert len(engines) == 1 and engines[0].count("rollout engine 'vllm' NOT AVAILABLE HERE: ") == 1, out
    assert main(["sweep", str(spec), "--validate-only"]) == 0
    assert "rollout engines" not in capsys.readouterr().out  # the tiny model's evaluation: generate


def test_the_paper_spec_notes_its_model_and_engine_as_the_dry_run_does(tmp_path, capsys, monkeypatch):
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)  # its sweep directory: sweep_runs/ here
    assert main(["sweep", str(REPO / "sweeps/paper/fig2_clip.yaml"), "--validate-only"]) == 0
    out = capsys.readouterr().out
    assert "note: rollout engines this machine cannot start, so trials here would fail: rollout engine 'vllm' NOT " \
           "AVAILABLE HERE" in out
    if "Klear-Reasoner-8B-SFT (NOT AVAILABLE HERE" not in out:  # cached on this machine: nothing to note
        assert "note: models" not in out


def test_the_sweep_refuses_an_unknown_attention_before_any_trial(tmp_path, capsys):
    spec = write_spec(tmp_path)
    assert main(["sweep", str(spec), "model.attn_implementation=nosuch", "--validate-only"]) == 2
    assert "every trial would stop before training: model.attn_implementation 'nosuch'" in capsys.readouterr().err
