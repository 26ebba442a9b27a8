"""A plugin edited while one Python process keeps running (a notebook, a sweep): the code a run runs is the code it
records and keeps. A walkthrough found a notebook's second ``run_experiment(cfg)`` running the plugin as ``compose``
had imported it while the run kept a copy of the edited file, an edited helper module running stale, and a sweep's
later trials running a plugin edited mid-sweep beside the earlier trials' arms."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from klear_lab.config.compose import compose
from klear_lab.errors import ConfigError

EXPERIMENT = Path(__file__).resolve().parents[3] / "experiments" / "quickstart" / "sft.yaml"

pytestmark = pytest.mark.usefixtures("registries_restored")


def mix_plugin(mix: str, version: str, marker: Path, helper: str | None = None) -> str:
    """A data-mix plugin registering ``mix`` that writes ``version`` (and its helper's ``value()``) to ``marker``
    when the run calls it: which code ran."""
    said = f" + str({helper}.value())" if helper else ""
    return (f"import {helper}\n" if helper else "") + textwrap.dedent(f'''
        from dataclasses import dataclass
        from pathlib import Path
        from klear_lab.registry import DATA_MIX

        @DATA_MIX.register("{mix}")
        @dataclass(frozen=True)
        class Mix:
            """Test plugin."""
            limit: int = 3

            def __call__(self, pools, ranks, seed):
                Path({str(marker)!r}).write_text("{version}"{said})
                return [r for recs in pools.values() for r in recs]
    ''')


def test_a_plugin_edited_after_compose_runs_as_the_run_records_it(tmp_path, tiny_sft_overrides):
    from klear_lab.run import run_experiment

    plugin, marker = tmp_path / "notebook_mix.py", tmp_path / "ran.txt"
    plugin.write_text(mix_plugin("notebook_mix", "v1", marker))
    cfg = compose(EXPERIMENT, [*tiny_sft_overrides, f"plugins=[{plugin}]", "data.mix=notebook_mix",
                               "trainer.accelerator=cpu", "trainer.num_threads=1"])
    plugin.write_text(mix_plugin("notebook_mix", "v2", marker))
    result = run_experiment(cfg)
    assert marker.read_text() == "v2"  # it ran v1 and kept v2
    (kept,) = (Path(result.run_dir) / "plugins").glob("notebook_mix-*.py")
    assert '"v2"' in kept.read_text()


def test_a_helper_edited_after_its_plugin_was_imported_is_refused_in_that_process(tmp_path):
    plugin, marker = tmp_path / "stale_helper_mix.py", tmp_path / "ran.txt"
    plugin.write_text(mix_plugin("stale_helper_mix", "v1", marker, helper="stale_helper_h"))
    (tmp_path / "stale_helper_h.py").write_text("def value():\n    return 1\n")
    compose(EXPERIMENT, [f"plugins=[{plugin}]", "data.mix=stale_helper_mix"])
    (tmp_path / "stale_helper_h.py").write_text("def value():\n    return 2\n")
    with pytest.raises(ConfigError, match=rf"its helper module {tmp_path / 'stale_helper_h.py'} was edited since this "
                                          r"process imported it.*Run it in a new process \(in a notebook, restart"):
        compose(EXPERIMENT, [f"plugins=[{plugin}]", "data.mix=stale_helper_mix"])
    (tmp_path / "stale_helper_h.py").write_text("def value():\n    return 1\n")  # put back: loads again
    compose(EXPERIMENT, [f"plugins=[{plugin}]", "data.mix=stale_helper_mix"])


def test_a_trial_of_a_plugin_edited_since_the_sweep_started_is_refused(tmp_path):
    from klear_lab.sweep.identity import check_plugins_unchanged, plugin_files

    plugin, other = tmp_path / "sweep_edit_mix.py", tmp_path / "sweep_axis_mix.py"
    plugin.write_text(mix_plugin("sweep_edit_mix", "v1", tmp_path / "ran.txt"))
    other.write_text(mix_plugin("sweep_axis_mix", "v1", tmp_path / "ran.txt"))
    started = plugin_files({"plugins": [str(plugin)]})
    check_plugins_unchanged(started, {"plugins": [str(plugin), str(other)]})  # one a trial's layer adds: unchecked
    plugin.write_text(mix_plugin("sweep_edit_mix", "v2", tmp_path / "ran.txt"))
    with pytest.raises(ConfigError, match=rf"^plugins: edited {plugin} since this sweep started: its trials would "
                                          "compare different code"):
        check_plugins_unchanged(started, {"plugins": [str(plugin)]})


def test_a_joiner_checks_against_the_studys_record_where_it_reads_the_same_paths():
    from klear_lab.sweep.identity import FILES, joined_plugin_files

    recorded = {FILES: {"d-old": "/c/my_clip.py", "d-mix": "/c/my_mix.py"}}
    own = {"d-new": "/c/my_clip.py", "d-mix": "/c/my_mix.py"}  # my_clip.py edited before this worker joined
    assert joined_plugin_files(recorded, own) == {"d-old": "/c/my_clip.py", "d-mix": "/c/my_mix.py"}
    elsewhere = {"d-new": "/home/b/my_clip.py"}  # another machine's checkout: its own code is all it can check
    assert joined_plugin_files(recorded, elsewhere) == elsewhere
    assert joined_plugin_files(None, own) == own  # a study recorded before it kept the files
