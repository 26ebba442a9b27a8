"""A plugin edited while its sweep runs, end to end: a real sweep process, trial subprocesses and Optuna on SQLite.

The trials after the edit would have run the new code beside the arms that ran the old, and the comparison table
would have set them side by side without a word. Each such trial is refused as a config error naming the file; the
sweep ends saying to fix that first; with the file put back, the same command runs the refused points and only them.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "sweep"))
import sweep_fixtures as fx  # noqa: E402

from klear_lab.sweep.spec import load_spec  # noqa: E402
from klear_lab.sweep.storage import default_storage_url, open_study  # noqa: E402

PLUGIN = "# a plugin that registers nothing: the trials check its code, the stand-in runner never imports it\n"


def test_trials_after_a_plugin_edit_are_refused_and_run_once_the_file_is_back(tmp_path):
    plugin = tmp_path / "my_clip.py"
    plugin.write_text(PLUGIN)
    spec_path = fx.write_spec(tmp_path, lrs=(0.001, 0.002), runner=fx.EDITING_RUNNER, overrides=[f"plugins=[{plugin}]"])
    spec = load_spec(spec_path)
    spec.sweep_dir.mkdir(parents=True)
    (spec.sweep_dir / "edit-plugin").touch()  # the first trial edits the plugin as it ends
    log = tmp_path / "sweep.log"

    assert fx.wait_sweep(fx.start_sweep(spec_path, "--workers", "1", sleep=0.1, log=log), 240, log) == 1
    text = log.read_text()
    assert [lr for lr, *_ in fx.invocations(spec.sweep_dir)] == [0.001], text[-3000:]
    refused = f"config error: plugins: edited {plugin} since this sweep started"
    assert text.count(refused) == 1, text[-3000:]
    assert "fix the config first: 1 trial(s) failed on a config or data error" in text, text[-3000:]
    assert "rerun the same command" not in text.splitlines()[-1]

    plugin.write_text(PLUGIN)  # put back as it was: the study's base is the same again
    assert fx.wait_sweep(fx.start_sweep(spec_path, "--workers", "1", sleep=0.1, log=log), 240, log) == 0, \
        log.read_text()[-3000:]
    assert sorted(lr for lr, *_ in fx.invocations(spec.sweep_dir)) == [0.001, 0.002]
    study = open_study(spec, default_storage_url(spec), create=False, heartbeat=False)
    done = [t.user_attrs["point"] for t in study.get_trials() if t.state.name == "COMPLETE"]
    assert len(done) == len(set(done)) == 2


def test_a_worker_joining_after_a_plugin_edit_refuses_its_trials_too(tmp_path):
    """A ``--join`` worker took its plugins' code at its own start: one started after an edit ran the new code
    beside the first worker's arms. It now checks the code against the study's record before it takes a trial
    (failing each trial it took left none for a rerun once the file was back: a review)."""
    import time

    plugin = tmp_path / "my_clip.py"
    plugin.write_text(PLUGIN)
    spec_path = fx.write_spec(tmp_path, lrs=(0.001, 0.002), runner=fx.RUNNER, overrides=[f"plugins=[{plugin}]"])
    spec = load_spec(spec_path)
    log = tmp_path / "sweep.log"
    first = fx.start_sweep(spec_path, "--workers", "1", sleep=20, log=log)  # busy with trial 0 meanwhile
    deadline = time.time() + 120
    while not fx.invocations(spec.sweep_dir):
        assert first.poll() is None and time.time() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)
    plugin.write_text(PLUGIN + "# edited while the sweep ran\n")
    joiner = fx.start_sweep(spec_path, "--join", "--workers", "1", sleep=0.1, log=log)
    assert fx.wait_sweep(joiner, 120, log) == 2, log.read_text()[-3000:]  # refused before it took a trial
    assert f"klear-lab: error: plugins: edited {plugin} since this sweep started" in log.read_text()
    fx.wait_sweep(first, 120, log)
    text = log.read_text()
    assert [lr for lr, *_ in fx.invocations(spec.sweep_dir)] == [0.001], text[-3000:]
    assert text.count(f"config error: plugins: edited {plugin} since this sweep started") == 1, text[-3000:]  # 1's
