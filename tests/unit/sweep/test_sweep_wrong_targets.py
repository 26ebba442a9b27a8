"""What a user walkthrough typed where a command wanted another kind of file: a sweep directory given to `sweep`
(it said "expected an experiment YAML file") or to `reproduce` (each YAML in it read as an analysis, then an empty
table), and a spec without `experiment:` (its trials ran klear-lab's defaults; its W&B export's command took an
override for the experiment file)."""

from __future__ import annotations

import json

import yaml
from sweep_fixtures import write_spec

from klear_lab.cli_sweep import main


def _sweep_dir(tmp_path):
    sweep = tmp_path / "sweep_runs" / "mine"
    sweep.mkdir(parents=True)
    (sweep / "spec.yaml").write_text("name: mine\n")
    (sweep / "wandb_sweep.yaml").write_text("command: []\n")
    (sweep / "sweep.json").write_text(json.dumps({"name": "mine", "spec": "/home/me/mine.yaml"}))
    return sweep


def test_a_sweep_directory_given_to_sweep_names_the_spec_that_runs_it(tmp_path, capsys):
    sweep = _sweep_dir(tmp_path)
    assert main(["sweep", str(sweep), "--validate-only"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (f"{sweep}: a sweep directory; a sweep is run (or resumed) by its spec: klear-lab sweep /home/me/mine.yaml "
            f"(the copy it froze: {sweep / 'spec.yaml'}); its table: klear-lab compare {sweep}") in err, err
    other = tmp_path / "specs"
    other.mkdir()
    (other / "a.yaml").write_text("name: a\n")
    assert main(["sweep", str(other)]) == 2
    assert f"{other}: is a directory; expected a sweep spec YAML file (in it: a.yaml)" in capsys.readouterr().err


def test_a_sweep_directory_given_to_reproduce_says_an_analysis_comes_first(tmp_path, capsys):
    sweep = _sweep_dir(tmp_path)
    assert main(["reproduce", str(sweep)]) == 2
    out, err = capsys.readouterr()
    assert "a sweep directory, not an analysis: reproduce takes an analysis spec first" in " ".join(err.split()), err
    assert "claims" not in out and "unknown key" not in err  # neither read as analyses nor an empty table


def test_a_folder_whose_analyses_all_fail_prints_no_empty_table(tmp_path, capsys):
    folder = tmp_path / "analyses"
    folder.mkdir()
    (folder / "bad.yaml").write_text("title: t\nunknown_key: 1\n")
    assert main(["reproduce", str(folder)]) == 2
    out, err = capsys.readouterr()
    assert "1 analysis spec(s) failed: bad" in err and "paper's claims" not in out, out


def test_a_spec_without_an_experiment_is_refused_before_anything_runs(tmp_path, capsys):
    spec = write_spec(tmp_path, runner="klear_lab.run:run_experiment")
    body = yaml.safe_load(spec.read_text())
    del body["experiment"]
    spec.write_text(yaml.safe_dump(body))
    for args in (["--validate-only"], ["--wandb-export"]):
        assert main(["sweep", str(spec), *args]) == 2
        assert f"{spec}: experiment: missing: a sweep's trials run `klear-lab train EXPERIMENT`" in " ".join(
            capsys.readouterr().err.split())
    assert not (tmp_path / "out").exists()


def test_validate_only_with_wandb_export_is_refused_rather_than_writing_the_export(tmp_path, capsys):
    spec = write_spec(tmp_path)
    assert main(["sweep", str(spec), "--validate-only", "--wandb-export"]) == 2
    assert "--validate-only writes nothing and --wandb-export writes the W&B sweep config: give one" in \
        capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_folder_above_sweeps_lists_them(tmp_path, capsys):
    sweep = _sweep_dir(tmp_path)
    for command in ("compare", "dashboard"):
        assert main([command, str(sweep.parent)]) == 2
        assert ("not a sweep directory (no sweep.json or spec.yaml); give the sweep's directory or its spec file "
                "(the sweeps in it: mine)") in " ".join(capsys.readouterr().err.split())
