"""``rl.*`` typed for an SFT experiment, ``sft.*`` for an RL one: read by nothing, yet saved and hashed (two
identical runs under two hashes, a sweep of identical arms). Refused where typed; a file's kept (saved configs)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from klear_lab.cli import main
from klear_lab.config.compose import compose
from klear_lab.errors import ConfigError
from klear_lab.tracking import config_hash

REPO = Path(__file__).resolve().parents[3]
SFT, RL = REPO / "experiments/quickstart/sft.yaml", REPO / "experiments/quickstart/rl.yaml"


def test_the_other_kinds_settings_on_a_command_line_are_refused_naming_them(capsys):
    assert main(["config", str(SFT), "rl.clip=ppo", "rl.clip.eps=0.3"]) == 2
    err = capsys.readouterr().err
    assert ("command line: rl.clip.eps (and rl.clip.name): an SFT run (run.kind: sft) reads no rl.* setting: it "
            "would change nothing but the config hash") in err
    assert main(["config", str(RL), "sft.max_steps=5"]) == 2
    assert "command line: sft.max_steps: an RL run (run.kind: rl) reads no sft.* setting" in capsys.readouterr().err
    assert main(["config", str(SFT), "rl.logp_chunk_tokens=64"]) == 2  # not hashed: it would change nothing
    err = capsys.readouterr().err
    assert "reads no rl.* setting: it would change nothing; set it on an RL experiment" in err, err


def test_a_notebook_mapping_is_refused_and_defaults_and_the_rollout_engine_pass():
    with pytest.raises(ConfigError, match=r"python mapping: rl.steps: an SFT run"):
        compose({"base": str(SFT), "rl": {"steps": 7}})
    same = compose(str(SFT), ["rl.clip=gppo"])  # the default: changes nothing, not even the hash
    assert config_hash(same) == config_hash(compose(str(SFT), []))
    assert compose(str(SFT), ["rl.rollout.batch_size=3"])["rl"]["rollout"]["batch_size"] == 3  # eval.engine: rollout
    with pytest.warns(UserWarning, match=r"command line: run.kind=rl makes .*sft.yaml an RL run, which reads none "
                                         r"of its sft.\* settings \(sft.tokens_per_micro_batch\)"):
        made = compose(str(SFT), ["run.kind=rl", "rl.steps=7"])  # made an RL run on the same line: the file's
    assert made["rl"]["steps"] == 7  # sft.* settings read by nothing (a walkthrough: it said nothing)


def test_a_saved_config_with_such_a_setting_still_composes(tmp_path):
    """Written out in a file (a run's config.yaml from before the check): a rerun must compose it."""
    saved = compose(str(SFT), [])
    saved["rl"]["steps"] = 7
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(saved))
    assert compose(str(path), [])["rl"]["steps"] == 7


def test_a_sweep_axis_on_the_other_kinds_settings_is_refused_before_any_trial(tmp_path, capsys):
    from klear_lab.cli_sweep import main as sweep_main

    body = {"name": "unread", "experiment": str(SFT), "axes": {"rl.clip.name": ["ppo", "gppo"]}, "seeds": [0],
            "objective": {"metric": "val/acc", "direction": "maximize"}, "out_dir": str(tmp_path / "out")}
    spec = tmp_path / "unread.yaml"
    spec.write_text(yaml.safe_dump(body))
    assert sweep_main(["sweep", str(spec), "--validate-only"]) == 2
    err = capsys.readouterr().err
    assert "rl.clip.name: an SFT run (run.kind: sft) reads no rl.* setting" in err, err
