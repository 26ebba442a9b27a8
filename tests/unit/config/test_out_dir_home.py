"""``run.out_dir=~/runs``: the run directory is under the home directory, not in a literal ``./~``."""

from __future__ import annotations

import json
from pathlib import Path

from klear_lab.config.compose import compose
from klear_lab.starting_point import find_completed_run
from klear_lab.tracking import config_hash, create_run_dir, saved_config, write_config

SFT = str(Path(__file__).resolve().parents[3] / "experiments/quickstart/sft.yaml")


def test_a_tilde_out_dir_is_the_home_directory_and_stays_as_written(tmp_path, monkeypatch):
    """config.yaml and run.json went to ``./~/runs`` while Lightning and W&B expanded ``~``: one run in two
    places, which crashed at its first checkpoint. The saved config keeps ``~/runs`` as the user wrote it."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    cfg = compose(SFT, ["run.out_dir=~/runs"])
    run_dir = create_run_dir(cfg)
    write_config(run_dir, cfg)
    assert run_dir.parent == tmp_path / "home" / "runs" and not (tmp_path / "~").exists()
    assert saved_config(run_dir)["run"]["out_dir"] == "~/runs"
    (run_dir / "run.json").write_text(json.dumps({"status": "completed", "config_hash": config_hash(cfg)}))
    assert find_completed_run(Path("~/runs"), config_hash(cfg), need_model=False) == run_dir
