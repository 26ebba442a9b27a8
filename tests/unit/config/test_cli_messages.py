"""What the CLI says in a fresh clone and on a wrong path: answers, not misleading errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from klear_lab.cli import build_parser, main
from klear_lab.config.compose import compose
from klear_lab.errors import ConfigError


def test_runs_in_a_fresh_clone_says_there_are_none_yet(tmp_path, capsys, monkeypatch):
    """No runs/ or sweep_runs/ here: nothing has run yet (was exit 2, "no runs/ ..."); a directory
    given that does not exist stays an error."""
    monkeypatch.chdir(tmp_path)
    assert main(["runs"]) == 0
    assert capsys.readouterr().out.strip() == f"no runs yet under {tmp_path} (no runs/ or sweep_runs/ directory)"
    assert main(["runs", "--json"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("no runs yet under")  # stdout stays JSON lines (none)
    assert main(["runs", "runs"]) == 2
    assert "runs: no such directory" in capsys.readouterr().err


def test_a_directory_for_an_experiment_is_named_as_one(tmp_path, capsys):
    (tmp_path / "sft.yaml").write_text("run: {kind: sft}\n")
    with pytest.raises(ConfigError, match="is a directory; expected an experiment YAML file \\(in it: sft.yaml\\)"):
        compose(tmp_path)
    assert main(["config", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "is a directory; expected an experiment YAML file" in err and "not found" not in err


def test_a_sweep_spec_analysis_spec_or_run_record_given_as_an_experiment_is_named_with_its_command(tmp_path, capsys,
                                                                                                   monkeypatch):
    """``klear-lab train sweeps/quickstart.yaml`` said "unknown key 'description'"; ``config --diff RUN/run.json``
    said "unknown key 'config_hash'". Now each says what the file is and what to run instead (exit 2)."""
    import shutil

    root = Path(__file__).resolve().parents[3]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sweeps").mkdir()
    shutil.copy(root / "sweeps/quickstart.yaml", "sweeps/quickstart.yaml")
    shutil.copy(root / "analysis/fig2_clip.yaml", "fig2.yaml")
    shutil.copytree(root / "experiments/quickstart", "experiments/quickstart")
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "run.json").write_text('{"status": "completed", "config_hash": "ab12", "run_id": "r1", "data": {}}')
    said = {
        "sweeps/quickstart.yaml": "sweeps/quickstart.yaml: a sweep spec (keys axes, baseline, description, "
        "experiment), not an experiment: run it with `klear-lab sweep sweeps/quickstart.yaml`; its experiment is "
        "experiments/quickstart/rl.yaml",
        "fig2.yaml": "fig2.yaml: an analysis spec (keys baseline, benchmarks, claims, paper), not an experiment: "
        "`klear-lab reproduce fig2.yaml`",
        "runs/r1/run.json": "runs/r1/run.json: a run's record (keys config_hash, data, run_id, status), not an "
        "experiment: give the run's saved config, runs/r1/config.yaml",
    }
    for given, message in said.items():
        diff = ["config", "experiments/quickstart/sft.yaml", "--diff", given]
        for argv in (["train", given, "--dry-run"], ["config", given], diff):
            assert main(argv) == 2, argv
            err = capsys.readouterr().err
            assert message in err and "unknown key" not in err, (argv, err)
    (tmp_path / "mine.yaml").write_text("base: sweeps/quickstart.yaml\n")  # a base: is read the same way
    with pytest.raises(ConfigError, match="quickstart.yaml: a sweep spec"):
        compose("mine.yaml")


def test_reproduce_help_prints_one_percent_sign(capsys):
    """argparse expands %% in help strings, not in descriptions: it printed "95 %%"."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["reproduce", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "95 % intervals" in out and "%%" not in out


def test_the_clis_own_warnings_are_one_line_without_the_calling_source_line():
    """The default format printed the source line of the call after the message (``"settings": settings,
    "optim": builders.optim_settings(...)``), which read as part of it (a new-user walkthrough)."""
    import os

    from klear_lab import cli

    own = os.path.join(cli.PACKAGE_DIR, "builders.py")
    assert cli.format_warning("optim.warmup_steps=30 ...", UserWarning, own, 248) == \
        "klear-lab: warning: optim.warmup_steps=30 ...\n"
    other = cli.format_warning("deprecated", DeprecationWarning, own, 1, line="x = 1")
    assert "DeprecationWarning" in other  # not klear-lab's own message: the default format
    assert "UserWarning" in cli.format_warning("m", UserWarning, "/elsewhere/lib.py", 3, line="y = 2")


def test_the_top_level_help_is_whole_and_version_is_answered(capsys):
    """``klear-lab --help`` printed its docstring's first line, cut mid-list ("(+ sweep, compare, reproduce,");
    ``--version`` was "the following arguments are required: command", exit 2."""
    from importlib.metadata import version

    for flag in ("--help", "--version"):
        with pytest.raises(SystemExit) as done:
            build_parser().parse_args([flag])
        assert done.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "train, resume, eval, runs, config, components, sweep, compare, reproduce, dashboard." in out
    assert "``" not in out and f"klear-lab {version('klear-lab')}" in out
