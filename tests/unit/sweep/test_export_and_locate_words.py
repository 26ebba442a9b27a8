"""Paths read from the working directory are said to be: the W&B export's command (an experiment outside it is
written absolute) and a spec's relative ``out_dir`` when ``compare`` from another directory finds no sweep."""

from __future__ import annotations

import yaml
from sweep_fixtures import write_spec

from klear_lab.cli_sweep import main
from klear_lab.sweep.launch import freeze_spec
from klear_lab.sweep.locate import locate
from klear_lab.sweep.spec import load_spec
from klear_lab.sweep.storage import default_storage_url


def test_the_export_names_the_working_directory_and_writes_an_outside_experiment_absolute(tmp_path, capsys,
                                                                                        monkeypatch):
    """Exported from a sibling directory the experiment read ``../specs/exp.yaml``: found only from there."""
    specs, elsewhere = tmp_path / "specs", tmp_path / "elsewhere"
    specs.mkdir()
    elsewhere.mkdir()
    spec = write_spec(specs)
    monkeypatch.chdir(elsewhere)
    assert main(["sweep", str(spec), "--wandb-export"]) == 0
    note = f"its command's relative paths are read from {elsewhere}: run `wandb agent` there"
    assert note in capsys.readouterr().out
    out = specs / "out" / "toy" / "wandb_sweep.yaml"
    assert f"# {note}\n" in out.read_text()
    assert yaml.safe_load(out.read_text())["command"][3] == str(specs / "exp.yaml")


def test_an_experiment_under_the_working_directory_stays_relative(tmp_path, monkeypatch):
    """Relative to a checkout's root, the export serves an agent in any clone of it."""
    from klear_lab.sweep.wandb_export import wandb_sweep_config

    (tmp_path / "sub").mkdir()
    spec = write_spec(tmp_path / "sub")
    monkeypatch.chdir(tmp_path)
    assert wandb_sweep_config(load_spec(spec))["command"][3] == "sub/exp.yaml"


def test_compare_from_another_directory_names_where_a_relative_out_dir_was_read(tmp_path, capsys, monkeypatch):
    ran, elsewhere = tmp_path / "ran", tmp_path / "elsewhere"
    ran.mkdir()
    elsewhere.mkdir()
    spec_path = write_spec(ran, out_dir="sweep_runs")
    monkeypatch.chdir(ran)
    spec = load_spec(spec_path)
    freeze_spec(spec, default_storage_url(spec))  # the sweep ran here
    assert locate(spec_path)[0].sweep_dir.resolve() == ran / "sweep_runs" / "toy"  # found from where it ran
    monkeypatch.chdir(elsewhere)
    assert main(["compare", str(spec_path)]) == 2
    err = capsys.readouterr().err
    assert f"no study 'toy' in sqlite:///{elsewhere / 'sweep_runs/toy/study.db'}; start it with " in err
    assert f"out_dir 'sweep_runs' is read relative to the working directory {elsewhere}" in err
    assert not (elsewhere / "sweep_runs").exists()


def test_an_absolute_out_dir_gets_no_working_directory_note(tmp_path, capsys, monkeypatch):
    spec_path = write_spec(tmp_path)  # out_dir: tmp_path/out
    monkeypatch.chdir(tmp_path)
    assert main(["compare", str(spec_path)]) == 2
    err = capsys.readouterr().err
    assert "no study 'toy' in" in err and "working directory" not in err
