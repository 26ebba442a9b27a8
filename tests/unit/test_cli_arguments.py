"""``klear-lab`` argument handling a fresh-user review found wrong: optional overrides named as required, a
quoted ``~`` in ``runs``, ``eval`` and ``train``."""

from __future__ import annotations

import json

import pytest

from klear_lab.cli import build_parser, main


@pytest.mark.parametrize(("command", "required"), [
    ("train", "experiment"), ("eval", "target"), ("resume", "run_dir"), ("sweep", "spec")])
def test_a_missing_argument_error_names_only_the_required_one(command, required, capsys):
    """It said "the following arguments are required: experiment, overrides": overrides are optional."""
    with pytest.raises(SystemExit) as exited:
        main([command])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.rstrip().endswith(f"error: the following arguments are required: {required}"), err


@pytest.mark.parametrize("command", ["train", "eval", "resume", "sweep"])
def test_overrides_are_optional_and_still_taken(command):
    parser = build_parser()
    assert parser.parse_args([command, "x.yaml"]).overrides == []
    assert parser.parse_args([command, "x.yaml", "a=1", "b=2"]).overrides == ["a=1", "b=2"]


def test_runs_expands_a_quoted_tilde(tmp_path, capsys, monkeypatch):
    """``klear-lab runs '~/r'`` said "~/r: no such directory" (compare, dashboard and reproduce expand it)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "r" / "x"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"status": "completed", "tags": ["kind:sft"]}))
    (run / "config.yaml").write_text("run: {name: x}\n")
    assert main(["runs", "~/r", "--json"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["run_dir"] == str(run)
    assert main(["runs", "~/nowhere"]) == 2
    assert f"{tmp_path / 'nowhere'}: no such directory" in capsys.readouterr().err


def test_train_and_eval_expand_a_quoted_tilde(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["eval", "~/nowhere"]) == 2
    assert f"{tmp_path / 'nowhere'}: no such run directory or experiment file" in capsys.readouterr().err
    assert main(["train", "~/missing.yaml", "--dry-run"]) == 2
    assert str(tmp_path / "missing.yaml") in capsys.readouterr().err
