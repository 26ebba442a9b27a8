"""Messages a walkthrough of "Everyday use" found unhelpful: a run's file given for its directory, ``.yml`` for
``.yaml``, and a notebook's overrides given as one string."""

from __future__ import annotations

import pytest

from klear_lab.config.compose import compose
from klear_lab.errors import ConfigError
from klear_lab.resume import check_run_dir


def test_a_runs_config_given_for_its_directory_names_the_directory(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("run: {kind: sft}\n")
    (run / "run.json").write_text("{}")
    with pytest.raises(ConfigError, match=rf"config.yaml: a file of a run: give its directory \(klear-lab resume "
                                          rf"{run}\)"):
        check_run_dir(run / "config.yaml")
    with pytest.raises(ConfigError, match="not a run directory"):
        check_run_dir(tmp_path)


def test_a_yml_suffix_for_a_yaml_file_gets_a_did_you_mean(tmp_path):
    (tmp_path / "sft.yaml").write_text("base: null\n")
    with pytest.raises(ConfigError, match=r"sft.yml: config file not found \(did you mean .*sft.yaml\?\)"):
        compose(str(tmp_path / "sft.yml"))
    with pytest.raises(ConfigError, match=r"rl.yaml: config file not found$"):
        compose(str(tmp_path / "rl.yaml"))


def test_overrides_given_as_one_string_are_refused_as_such():
    with pytest.raises(ConfigError, match=r"overrides must be a list of key=value strings, got the string "
                                          r"'sft.max_steps=5' \(write \['sft.max_steps=5'\]\)"):
        compose(None, "sft.max_steps=5")
