"""A resumed run's ``run.json``: a damaged one stops ``klear-lab resume`` with an error naming the file (exit 2),
not a traceback; each attempt's code commit is recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from klear_lab import tracking
from klear_lab.cli import main
from klear_lab.config.compose import compose
from klear_lab.errors import ConfigError
from klear_lab.resume import check_resumable, saved_identity
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


def test_each_attempt_records_its_code_commit_and_a_new_one_warns(tmp_path, capsys, monkeypatch):
    """A resumed run kept only its first attempt's git_commit, as if every step had run on that code."""
    first = "1" * 40
    (tmp_path / "run.json").write_text(json.dumps({"git_commit": first, "attempts": 1, "status": "failed"}))
    monkeypatch.setattr(tracking, "git_commit", lambda path=None: first)
    assert saved_identity(tmp_path)["git_commits"] == [first, first]
    assert "warning" not in capsys.readouterr().err
    monkeypatch.setattr(tracking, "git_commit", lambda path=None: "2" * 40)
    identity = saved_identity(tmp_path)
    assert (identity["git_commit"], identity["git_commits"], identity["attempts"]) == (first, [first, "2" * 40], 2)
    assert f"previous attempt ran on {first}" in capsys.readouterr().err
    (tmp_path / "run.json").write_text(json.dumps({**identity, "status": "failed"}))  # a third attempt
    assert saved_identity(tmp_path)["git_commits"] == [first, "2" * 40, "2" * 40]
