"""A run is reproducible from its saved config after its plugin file is gone: the saved config names the original
file, and the copy of the code the run kept (``RUN_DIR/plugins/NAME-SHA8.py``) is used instead, with a warning.
Before, the rerun stopped on "cannot import it: no such file" and did not say the run had kept the code."""

from __future__ import annotations

import pytest
import yaml
from resume_helpers import SFT  # noqa: I001 - beside this file

from klear_lab.config.compose import compose
from klear_lab.registry import REGISTRIES
from klear_lab.run import run_experiment
from klear_lab.tracking import csv_rows

PLUGIN = '''
from dataclasses import dataclass
from klear_lab.registry import CLIP


@CLIP.register("kept_copy_clip")
@dataclass(frozen=True)
class KeptCopyClip:
    """A clip no run calls: the plugin only has to load."""
    eps: float = 0.2

    def __call__(self, logp, old_logp, adv, mask):
        raise NotImplementedError
'''


@pytest.fixture(autouse=True)
def registries_as_they_were():
    """The plugin's clip raises when called: left registered, a later test in this worker that asks every
    registered clip its statistics (``sweep.metrics.clip_metric_names``) would get nothing."""
    for registry in REGISTRIES.values():
        registry.load_builtins()
    before = {axis: registry.snapshot() for axis, registry in REGISTRIES.items()}
    yield
    for axis, entries in before.items():
        REGISTRIES[axis].restore(entries)


def test_a_saved_config_reruns_on_the_kept_copy_once_the_plugin_file_is_gone(tmp_path, tiny_sft_overrides, klear_cli):
    plugin = tmp_path / "mine" / "kept_copy_plugin.py"
    plugin.parent.mkdir()
    plugin.write_text(PLUGIN)
    first = run_experiment(compose(SFT, [*tiny_sft_overrides, f"plugins=[{plugin}]"]))
    (copy,) = (first.run_dir / "plugins").glob("kept_copy_plugin-*.py")
    plugin.unlink()
    # a fresh process, as a rerun is (in this one the deleted file's class keeps the name)
    done = klear_cli("train", str(first.run_dir / "config.yaml"), f"run.out_dir={tmp_path / 'again'}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"is gone; the copy of its code this run kept is used: {copy}" in " ".join(done.stderr.split())
    (again,) = (tmp_path / "again").iterdir()
    assert yaml.safe_load((again / "config.yaml").read_text())["plugins"] == [str(copy)]
    losses = [[r["train/loss"] for r in csv_rows(d / "csv" / "metrics.csv") if r.get("train/loss")]
              for d in (first.run_dir, again)]
    assert losses[0] == losses[1] and len(losses[0]) == 3
    assert again.name.split("-")[-2] == first.run_dir.name.split("-")[-2]  # the same config hash
