"""A sweep spec whose ``experiment:`` file does not exist: the value as written, where it resolved, and the
closest file of that directory."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from klear_lab.cli_sweep import main
from klear_lab.errors import ConfigError
from klear_lab.sweep.spec import load_spec


def _layout(tmp_path, experiment: str):
    """``experiments/quickstart/{sft,rl}.yaml`` and ``sweeps/bad.yaml`` naming ``experiment``."""
    exp_dir = tmp_path / "experiments" / "quickstart"
    exp_dir.mkdir(parents=True)
    for name in ("sft", "rl"):
        (exp_dir / f"{name}.yaml").write_text(f"run: {{name: {name}, kind: {name}}}\n")
    (tmp_path / "sweeps").mkdir()
    spec = tmp_path / "sweeps" / "bad.yaml"
    spec.write_text(yaml.safe_dump({"experiment": experiment, "axes": {"optim.lr": [0.1, 0.2]}, "objective": "val/acc",
                                    "out_dir": str(tmp_path / "out")}))
    return spec


def test_a_typo_in_the_experiment_gets_the_value_as_written_and_a_suggestion(tmp_path, monkeypatch, capsys):
    spec = _layout(tmp_path, "../experiments/quickstart/sftt.yaml")
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", "sweeps/bad.yaml", "--validate-only"]) == 2
    err = capsys.readouterr().err
    assert "sweeps/bad.yaml: experiment: '../experiments/quickstart/sftt.yaml' not found" in err
    assert "relative to the spec's directory: experiments/quickstart/sftt.yaml" in err
    assert "(did you mean '../experiments/quickstart/sft.yaml'?)" in err
    with pytest.raises(ConfigError, match="no directory"):
        spec.write_text(spec.read_text().replace("quickstart/sftt.yaml", "quikstart/sft.yaml"))
        load_spec(spec, check_base=True)
    assert load_spec(spec).experiment == tmp_path / "experiments" / "quikstart" / "sft.yaml"  # results need none


def test_a_sweep_directorys_frozen_spec_loads_without_its_experiment(tmp_path):
    """``compare SWEEP_DIR`` reads the frozen spec; it needs the results, not the base experiment."""
    spec = _layout(tmp_path, "../experiments/quickstart/sft.yaml")
    sweep_dir = tmp_path / "out" / "bad"
    sweep_dir.mkdir(parents=True)
    shutil.copy(spec, sweep_dir / "spec.yaml")
    (sweep_dir / "spec.yaml").write_text(spec.read_text().replace("../", str(tmp_path) + "/"))
    (sweep_dir / "sweep.json").write_text(json.dumps({"name": "bad"}))
    shutil.rmtree(tmp_path / "experiments")
    assert load_spec(sweep_dir / "spec.yaml").experiment == tmp_path / "experiments/quickstart/sft.yaml"


def test_a_path_from_the_working_directory_is_told_its_form_from_the_spec(tmp_path, monkeypatch, capsys):
    """``experiment: experiments/quickstart/sft.yaml`` in ``sweeps/``: the file exists from the working directory,
    but a spec's paths are read from its own; and the spec's neighbours, sweep specs, are never suggested."""
    spec = _layout(tmp_path, "experiments/quickstart/sft.yaml")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        load_spec("sweeps/bad.yaml", check_base=True)
    assert str(err.value).endswith("it is there from the working directory: a spec's paths are read from its own "
                                   "directory, so write experiment: ../experiments/quickstart/sft.yaml")
    spec.write_text(spec.read_text().replace("experiments/quickstart/sft.yaml", "bda.yaml"))
    with pytest.raises(ConfigError) as err:  # "did you mean 'bad.yaml'?" was the spec itself
        load_spec("sweeps/bad.yaml", check_base=True)
    assert str(err.value).endswith("no experiment YAML in sweeps")
    (tmp_path / "sweeps" / "other.yaml").write_text(spec.read_text())  # a sweep spec from the working directory
    spec.write_text(spec.read_text().replace("bda.yaml", "sweeps/other.yaml"))
    with pytest.raises(ConfigError) as err:  # not "so write experiment: other.yaml", a sweep spec
        load_spec("sweeps/bad.yaml", check_base=True)
    assert "working directory" not in str(err.value)
    spec.write_text(spec.read_text().replace("sweeps/other.yaml", "bda.yaml"))
    (tmp_path / "sweeps" / "bdb.yaml").write_text("run: {kind: sft}\n")
    with pytest.raises(ConfigError, match=r"did you mean 'bdb.yaml'\?"):
        load_spec("sweeps/bad.yaml", check_base=True)
