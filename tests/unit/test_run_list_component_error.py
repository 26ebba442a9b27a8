"""What ``klear-lab runs`` and ``klear-lab resume`` advise for a run a plugin's code failed (``ComponentError``).

A reward plugin returned 127 verdicts for 128 completions; ``klear-lab runs`` said "fix the config or data first
... klear-lab train RUN/config.yaml KEY=VALUE". Followed after fixing the plugin, that command ran the copy of the
plugin's code the run kept (``RUN/plugins/``) and failed the same way (found by a fresh-user walkthrough).
"""

from __future__ import annotations

import json
from pathlib import Path

from klear_lab.cli import main
from klear_lab.run_list import list_runs

EXPERIMENT = "/work/exp/rl.yaml"
ERROR = ("klear_lab.errors.ComponentError: reward 'short_reward' ({plugin}:5) returned a list of 127 for 128 "
         "completions; a reward returns one RewardOutput per completion")


def make_run(runs: Path, name: str, plugins: list[str], error_plugin: str, notes: str = "") -> Path:
    """A failed RL run as ``klear-lab train`` leaves one a plugin's reward failed (its kept copy included)."""
    run = runs / name
    (run / "plugins").mkdir(parents=True)
    (run / "plugins" / "short_reward-cc80b521.py").write_text("# the code the run ran\n")
    (run / "run.json").write_text(json.dumps({"status": "failed", "tags": ["kind:rl"], "config_hash": "abc",
                                              "error": ERROR.format(plugin=error_plugin)}))
    listed = "".join(f"- {p}\n" for p in plugins)
    (run / "config.yaml").write_text(f"plugins:\n{listed}run: {{name: {name}, kind: rl, experiment: {EXPERIMENT}, "
                                     f"notes: {notes or 'null'}}}\n")
    return run


def advice(run: Path) -> str:
    (row,) = [r for r in list_runs([run.parent]) if Path(r.run_dir) == run]
    return row.note.split(" -> ", 1)[1]


def test_a_plugin_failure_is_fixed_in_the_plugin_and_rerun_from_the_experiment(tmp_path):
    plugin = str(tmp_path / "short_reward.py")
    run = make_run(tmp_path / "runs", "shortrw-1", [plugin], plugin)
    assert advice(run) == (
        f"fix the plugin's code ({plugin}) first: its saved config.yaml runs the copy of it this run kept "
        f"({run / 'plugins'}), so rerun from its experiment with the same overrides: klear-lab train {EXPERIMENT} "
        f"KEY=VALUE ...; or from a copy of the config under another name: cp {run / 'config.yaml'} fixed.yaml && "
        "klear-lab train fixed.yaml")


def test_a_rerun_that_ran_a_kept_copy_names_the_plugin_file_not_the_copy(tmp_path):
    """The walkthrough's second run: its saved config names the first run's copy, which a copy of that config
    would run again; the file to fix is the one the first run listed."""
    plugin = str(tmp_path / "short_reward.py")
    first = make_run(tmp_path / "runs", "shortrw-1", [plugin], plugin)
    copy = str(first / "plugins" / "short_reward-cc80b521.py")
    second = make_run(tmp_path / "runs", "shortrw-2", [copy], copy)
    said = advice(second)
    assert said.startswith(f"fix the plugin's code ({plugin}) first: its saved config.yaml runs the copy")
    assert f"klear-lab train {EXPERIMENT} KEY=VALUE ..." in said
    assert "cp " not in said and "config.yaml KEY=VALUE" not in said


def test_a_plugin_module_is_fixed_and_the_saved_config_rerun(tmp_path):
    """A plugin imported by module name keeps no copy: the saved config runs the fixed code."""
    run = make_run(tmp_path / "runs", "shortrw-1", ["my_rewards"], "/site-packages/my_rewards.py")
    assert advice(run) == ("fix the component's code (the file the error names) first: a rerun would repeat it; "
                           f"then klear-lab train {run / 'config.yaml'}")


def test_a_sweep_trial_a_plugin_failed_is_fixed_in_the_plugin_and_its_sweep_rerun(tmp_path, capsys):
    """A sweep reads the plugin file itself (not a kept copy), and refuses edited plugin code once other trials
    finished: the advice says how to go on then. ``klear-lab resume`` says the same, with the command once."""
    sweep = tmp_path / "sweep_runs" / "quick"
    (sweep / "runs").mkdir(parents=True)
    (sweep / "sweep.json").write_text(json.dumps({"name": "quick", "spec": "sweeps/quick.yaml"}))
    plugin = str(tmp_path / "short_reward.py")
    run = make_run(sweep / "runs", "quick-a-s0", [plugin], plugin, notes="sweep quick trial 3")
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.ckpt").write_bytes(b"")
    fix = (f"fix the plugin's code ({plugin}) first, then rerun the sweep: klear-lab sweep sweeps/quick.yaml (once "
           "other trials of it finished, the sweep refuses the edited plugin: then run it as a new study, adding "
           "--name NEW)")
    assert advice(run) == f"sweep trial: {fix}"
    assert main(["resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{run}: a trial of a sweep, which failed with {ERROR.format(plugin=plugin)}: {fix}" in err
    assert "continue the sweep instead" not in err  # resumed from its checkpoint, the old code would run again


def test_a_relative_experiment_is_run_from_the_directory_the_run_started_in(tmp_path, monkeypatch):
    """``klear-lab runs /elsewhere/runs`` from another directory: ``klear-lab train exp/rl.yaml`` would not be found
    (a review)."""
    plugin = str(tmp_path / "short_reward.py")
    run = make_run(tmp_path / "runs", "shortrw-1", [plugin], plugin)
    (run / "config.yaml").write_text((run / "config.yaml").read_text().replace(EXPERIMENT, "exp/rl.yaml"))
    record = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**record, "work_dir": str(tmp_path)}))
    monkeypatch.chdir(tmp_path)
    assert "with the same overrides: klear-lab train exp/rl.yaml KEY=VALUE" in advice(run)
    monkeypatch.chdir(run)
    assert f"with the same overrides: cd {tmp_path} && klear-lab train exp/rl.yaml KEY=VALUE" in advice(run)


def test_a_run_that_records_its_command_is_told_to_run_it_again(tmp_path, monkeypatch):
    """Its overrides were "KEY=VALUE ...": ``run.json`` now records the command that started the run."""
    plugin = str(tmp_path / "short_reward.py")
    run = make_run(tmp_path / "runs", "shortrw-1", [plugin], plugin)
    record = json.loads((run / "run.json").read_text())
    command = ["klear-lab", "train", "exp/rl.yaml", "rl.steps=3", "run.name=two words"]
    (run / "run.json").write_text(json.dumps({**record, "work_dir": str(tmp_path), "command": command}))
    monkeypatch.chdir(tmp_path)
    assert "so rerun the command that started it: klear-lab train exp/rl.yaml rl.steps=3 'run.name=two words'; or " \
           "from a copy of the config" in advice(run)
    monkeypatch.chdir(run)
    assert f"started it: cd {tmp_path} && klear-lab train exp/rl.yaml" in advice(run)
    rerun = ["klear-lab", "train", str(run / "config.yaml")]  # a rerun of a saved config runs the kept copy again
    (run / "run.json").write_text(json.dumps({**record, "command": rerun}))
    assert "from its experiment with the same overrides: klear-lab train /work/exp/rl.yaml KEY=VALUE" in advice(run)
