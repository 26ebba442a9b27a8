"""A run is reproducible from its saved config after its plugin file is gone: the saved config names the original
file, and the copy of the code the run kept (``RUN_DIR/plugins/NAME-SHA8.py``) is used instead, with a warning;
the helper module the plugin imports comes from its own kept copy. Before, the rerun stopped on "cannot import
it: no such file" and did not say the run had kept the code; then, on the helper's import."""

from __future__ import annotations

import shutil

import pytest
import yaml
from resume_helpers import ROOT, SFT, Crash  # noqa: I001 - beside this file

from klear_lab.config.compose import compose
from klear_lab.run import run_experiment
from klear_lab.tracking import csv_rows

PLUGIN = '''
from dataclasses import dataclass
from kept_copy_helper import EPS
from klear_lab.registry import CLIP


@CLIP.register("kept_copy_clip")
@dataclass(frozen=True)
class KeptCopyClip:
    """A clip no run calls: the plugin only has to load."""
    eps: float = EPS

    def __call__(self, logp, old_logp, adv, mask):
        raise NotImplementedError
'''


def _write_plugin(folder, helper: str = "kept_copy_helper"):
    """``kept_copy_plugin.py`` and the helper module beside it that it imports, named ``helper``: a module
    another test of this process imported is not looked for beside the plugin (Python has it already)."""
    folder.mkdir()
    (folder / f"{helper}.py").write_text("EPS = 0.2\n")
    plugin = folder / "kept_copy_plugin.py"
    plugin.write_text(PLUGIN.replace("kept_copy_helper", helper))
    return plugin


pytestmark = pytest.mark.usefixtures("registries_restored")  # the plugins' components go after each test


def test_a_saved_config_reruns_on_the_kept_copy_once_the_plugin_file_is_gone(tmp_path, tiny_sft_overrides, klear_cli):
    plugin = _write_plugin(tmp_path / "mine")
    first = run_experiment(compose(SFT, [*tiny_sft_overrides, f"plugins=[{plugin}]"]))
    (copy,) = (first.run_dir / "plugins").glob("kept_copy_plugin-*.py")
    kept = sorted(p.name for p in (first.run_dir / "plugins").glob("*.py"))
    assert len(kept) == 2 and kept[0].startswith("kept_copy_helper-")
    shutil.rmtree(plugin.parent)  # the plugin and its helper
    # a fresh process, as a rerun is (in this one the deleted file's class keeps the name)
    done = klear_cli("train", str(first.run_dir / "config.yaml"), f"run.out_dir={tmp_path / 'again'}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"is gone; the copy of its code this run kept is used: {copy}" in " ".join(done.stderr.split())
    (again,) = [p for p in (tmp_path / "again").iterdir() if not p.name.startswith(".")]
    assert yaml.safe_load((again / "config.yaml").read_text())["plugins"] == [str(copy.resolve())]
    assert sorted(p.name for p in (again / "plugins").glob("*.py")) == kept  # not NAME-SHA8-SHA8.py; the helper too
    losses = [[r["train/loss"] for r in csv_rows(d / "csv" / "metrics.csv") if r.get("train/loss")]
              for d in (first.run_dir, again)]
    assert losses[0] == losses[1] and len(losses[0]) == 3
    assert again.name.split("-")[-2] == first.run_dir.name.split("-")[-2]  # the same config hash


def test_a_resume_after_the_plugin_file_is_gone_keeps_one_copy_and_a_config_that_reruns_anywhere(
        tmp_path, tiny_sft_overrides, klear_cli):
    """``klear-lab resume`` on the kept copy: the resumed config named the copy by a path relative to the
    working directory, and the run kept a copy of its copy (``NAME-SHA8-SHA8.py``)."""
    import json
    import os

    plugin = _write_plugin(tmp_path / "mine", helper="kept_copy_resume_helper")
    overrides = [o for o in tiny_sft_overrides if not o.startswith(("trainer.checkpoint", "sft.max_steps"))]
    overrides += ["trainer.checkpoint_every=2", "sft.max_steps=4", f"plugins=[{plugin}]"]
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_experiment(compose(SFT, overrides), callbacks=[Crash(3, lambda t: t.global_step)])
    (run_dir,) = (tmp_path / "runs").glob("*/")
    kept = sorted((run_dir / "plugins").glob("*.py"))
    assert len(kept) == 2
    (copy,) = (run_dir / "plugins").glob("kept_copy_plugin-*.py")
    shutil.rmtree(plugin.parent)
    done = klear_cli("resume", os.path.relpath(run_dir, ROOT))  # relative to the CLI's working directory
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"
    assert sorted((run_dir / "plugins").glob("*.py")) == kept
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["plugins"] == [str(copy.resolve())]

    moved = tmp_path / "elsewhere"  # the run directory moved: its config names a copy that is not there now
    shutil.move(run_dir, moved)
    done = klear_cli("train", str(moved / "config.yaml"), f"run.out_dir={tmp_path / 'again'}")
    assert done.returncode == 0, done.stderr[-3000:]
    said = " ".join(done.stderr.split())
    assert f"the copy of its code this run kept is used: {moved / 'plugins' / copy.name}" in said


def test_a_saved_config_reruns_on_the_kept_copy_after_the_plugin_file_was_edited(tmp_path, tiny_sft_overrides,
                                                                                   klear_cli):
    """An edited plugin ran silently on a rerun of the saved config, under another config hash (a review)."""
    plugin = _write_plugin(tmp_path / "mine", helper="kept_copy_edit_helper")
    first = run_experiment(compose(SFT, [*tiny_sft_overrides, f"plugins=[{plugin}]"]))
    (copy,) = (first.run_dir / "plugins").glob("kept_copy_plugin-*.py")
    plugin.write_text(plugin.read_text() + "\n# edited after the run\n")
    done = klear_cli("train", str(first.run_dir / "config.yaml"), f"run.out_dir={tmp_path / 'again'}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"changed since this run started; the copy of the code it ran is used: {copy}" in " ".join(
        done.stderr.split())
    (again,) = [p for p in (tmp_path / "again").iterdir() if not p.name.startswith(".")]
    assert again.name.split("-")[-2] == first.run_dir.name.split("-")[-2]  # the same config hash


def test_a_rerun_and_a_resume_after_a_helper_was_edited_use_the_kept_copies(tmp_path, tiny_sft_overrides,
                                                                             klear_cli):
    """An edited helper ran silently on a rerun and on a resume (two code versions in one run), under the same
    config hash, and the run kept a copy of the edited helper beside the one it started with (a review)."""
    import json

    plugin = _write_plugin(tmp_path / "mine", helper="kept_copy_edited_helper")
    helper = plugin.parent / "kept_copy_edited_helper.py"
    overrides = [o for o in tiny_sft_overrides if not o.startswith(("trainer.checkpoint", "sft.max_steps"))]
    overrides += ["trainer.checkpoint_every=2", "sft.max_steps=4", f"plugins=[{plugin}]"]
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_experiment(compose(SFT, overrides), callbacks=[Crash(3, lambda t: t.global_step)])
    (run_dir,) = (tmp_path / "runs").glob("*/")
    kept = sorted(p.name for p in (run_dir / "plugins").glob("*.py"))
    (copy,) = (run_dir / "plugins").glob("kept_copy_plugin-*.py")
    helper.write_text("EPS = 0.3\n")
    warned = (f"helper module {helper} of plugin '{plugin}' changed since this run started; the copies of the code "
              f"the run ran are used: {copy}")

    done = klear_cli("train", str(run_dir / "config.yaml"), f"run.out_dir={tmp_path / 'again'}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert warned in " ".join(done.stderr.split())
    (again,) = [p for p in (tmp_path / "again").iterdir() if not p.name.startswith(".")]
    assert sorted(p.name for p in (again / "plugins").glob("*.py")) == kept  # not the edited helper's code
    assert again.name.split("-")[-2] == run_dir.name.split("-")[-2]  # the same config hash

    done = klear_cli("resume", str(run_dir))
    assert done.returncode == 0, done.stderr[-3000:]
    assert warned in " ".join(done.stderr.split())
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"
    assert sorted(p.name for p in (run_dir / "plugins").glob("*.py")) == kept
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["plugins"] == [str(copy.resolve())]
