"""``klear-lab config A --diff B``: the keys whose values differ between two configs (experiment files, saved
``config.yaml`` files, run directories), and which of them change the config hash."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

from klear_lab.cli import main
from klear_lab.config.compose import compose
from klear_lab.config.yaml_io import dump_yaml
from klear_lab.config_diff import differences
from klear_lab.resume_checkpoint import config_changes as resume_changes
from klear_lab.sweep.identity import config_changes as study_changes

ROOT = Path(__file__).resolve().parents[3]
RL = ROOT / "experiments/quickstart/rl.yaml"


def test_a_switched_clip_and_a_seed_are_told_apart_by_the_hash():
    rows = differences(compose(RL, ["rl.clip=cispo", "run.seed=3"]), compose(RL))
    assert rows == [("rl.clip.beta1", "(unset)", "1.0", True), ("rl.clip.beta2", "(unset)", "1.0", True),
                    ("rl.clip.dual_clip_c", "(unset)", "null", True), ("rl.clip.name", '"cispo"', '"gppo"', True),
                    ("rl.clip.only_high", "(unset)", "false", True), ("run.seed", "3", "0", False)]


def test_a_list_of_sources_is_compared_item_by_item():
    a = compose(RL, ["data.sources.0.n_prompts=7"])
    (row,) = differences(a, compose(RL))
    assert row[0] == "data.sources.0.n_prompts" and row[1] == "7" and row[3] is True


def test_a_long_value_that_differs_only_past_what_is_shown_still_differs():
    """The study's refusal compared values cut to 60 characters: a long list changed at its end read as equal."""
    long_a, long_b = {"w": [1.0] * 30}, {"w": [1.0] * 29 + [2.0]}
    (row,) = differences(long_a | {"run": {}}, long_b | {"run": {}})
    assert row[0] == "w" and row[3] is True
    assert row[1].startswith("...") and row[1].endswith(", 1.0]") and row[2].endswith(", 2.0]")  # where they differ
    assert study_changes({"base": long_a}, {"base": long_b}) == f"w: {row[1]} -> {row[2]}"
    assert resume_changes(long_a, long_b).endswith("1.0, 2.0]")


def test_two_paths_that_differ_near_their_end_show_where():
    """Both were shown cut to the same 57 characters."""
    a = {"data": {"path": "/data/klear/shared/datasets/math/openr1_math_220k_filtered_v1.parquet"}}
    (row,) = differences(a, {"data": {"path": a["data"]["path"].replace("_v1", "_v2")}})
    assert row[1:3] == ('...math_220k_filtered_v1.parquet"', '...math_220k_filtered_v2.parquet"')


def test_cli_a_run_directory_against_its_experiment_is_the_same_config(tmp_path, capsys):
    run = tmp_path / "runs" / "some-run"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(dump_yaml(compose(RL, ["run.name=renamed"])))
    assert main(["config", str(RL), "--diff", str(run)]) == 0
    out = capsys.readouterr().out
    assert "1 key(s) differ (none changes the config hash: the same arm)" in out
    assert "run.name" in out
    assert main(["config", str(run / "config.yaml"), "--diff", str(run)]) == 0
    assert "no differences: the same config" in capsys.readouterr().out


@pytest.mark.parametrize("argv, said", [
    (["config", "--diff", str(RL)], "config --diff: give the config to compare first"),
    (["config", str(RL), "--keys", "rl", "--diff", str(RL)], "--keys and --diff do not go together"),
], ids=["no_first", "with_keys"])
def test_cli_misuse_exits_2_saying_what_to_give(argv, said, capsys):
    assert main(argv) == 2
    assert said in capsys.readouterr().err


def test_cli_a_directory_without_a_config_exits_2_naming_it(tmp_path, capsys):
    assert main(["config", str(RL), "--diff", str(tmp_path)]) == 2
    assert f"{tmp_path}: a directory without config.yaml" in capsys.readouterr().err


CLIP_PLUGIN = '''
from dataclasses import dataclass
from klear_lab.registry import CLIP

@CLIP.register("diff_test_clip")
@dataclass(frozen=True)
class Clip:
    """Test plugin ({version})."""
    eps: float = {eps}
    def __call__(self, logp, old_logp, adv, mask):
        raise NotImplementedError
'''


def test_two_versions_of_a_plugin_are_compared_in_one_process(tmp_path, registries_restored, capsys):
    """A run's kept copy and the file edited since both register the clip: the second failed with "already
    registered" (exit 2) instead of the table (a review)."""
    kept, edited = tmp_path / "kept" / "my_clip.py", tmp_path / "my_clip.py"
    kept.parent.mkdir()
    kept.write_text(CLIP_PLUGIN.format(version="as the run kept it", eps=0.2))
    edited.write_text(CLIP_PLUGIN.format(version="edited", eps=0.3))
    common = ["rl.clip=diff_test_clip"]
    assert main(["config", str(RL), f"plugins=[{kept}]", *common, "--diff", str(RL)]) == 0  # loads the kept copy
    capsys.readouterr()
    run = tmp_path / "run"
    run.mkdir()
    from klear_lab.config_diff import resolved

    (run / "config.yaml").write_text(dump_yaml(resolved(str(RL), [f"plugins=[{kept}]", *common])))
    assert main(["config", str(RL), f"plugins=[{edited}]", *common, "--diff", str(run)]) == 0
    out = capsys.readouterr().out
    assert "2 key(s) differ (2 of them change the config hash)" in out
    assert "rl.clip.eps" in out and "plugins" in out


def test_a_starting_points_plugin_is_forgotten_too(tmp_path, registries_restored, capsys):
    """The starting point's experiment is composed to look its runs up; its plugin stayed registered, and the
    other side's version of it failed with "already registered" (a review)."""
    kept, edited = tmp_path / "kept" / "my_clip.py", tmp_path / "my_clip.py"
    kept.parent.mkdir()
    kept.write_text(CLIP_PLUGIN.format(version="the starting point's", eps=0.2))
    edited.write_text(CLIP_PLUGIN.format(version="edited", eps=0.3))
    parent = tmp_path / "parent.yaml"
    parent.write_text(f"base: {RL.parent / 'sft.yaml'}\nplugins: [{kept}]\nrun: {{out_dir: {tmp_path / 'runs'}}}\n")
    child = tmp_path / "child.yaml"
    child.write_text(f"base: {RL}\nmodel: {{init_from: {parent}}}\nrun: {{out_dir: {tmp_path / 'runs'}}}\n")
    other = tmp_path / "other.yaml"
    other.write_text(f"base: {RL}\nplugins: [{edited}]\nrl: {{clip: diff_test_clip}}\n")
    assert main(["config", str(child), "--diff", str(other)]) == 0, capsys.readouterr().err
    assert "rl.clip.name" in capsys.readouterr().out
