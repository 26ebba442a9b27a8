"""What a reproduction says its numbers ran on (``analysis/scale.py``): a custom runner's own scale, and a local
model directory named readably rather than by its absolute path."""

from __future__ import annotations

from sweep_fixtures import write_spec

from klear_lab.analysis.scale import custom_runner_scale, model_label, scale_of
from klear_lab.sweep.spec import DEFAULT_RUNNER, load_spec


def test_a_custom_runner_sweep_says_its_scale_is_the_runners(tmp_path):
    """It said "a tiny model built from config" of a sweep whose runner trains whatever it trains."""
    spec = load_spec(write_spec(tmp_path))  # sweep_fixtures.py:run, a stand-in for run_experiment
    scale = scale_of(spec)
    assert scale.short == "custom runner sweep_fixtures.py:run"
    assert scale.line.startswith(f"ours: from a custom runner: {spec.runner}; its scale is its own")
    assert "tiny" not in scale.short + scale.line
    assert scale.caution  # printed in yellow, as a tiny model's line is: its scores are not the paper's


def test_a_module_runner_is_named_as_written():
    assert custom_runner_scale("my_lab.train:run").short == "custom runner my_lab.train:run"


def test_the_default_runner_still_reads_the_experiment(tmp_path):
    spec = load_spec(write_spec(tmp_path, runner=DEFAULT_RUNNER))
    assert scale_of(spec).short == "tiny model, embedded world" and scale_of(spec).caution


def test_a_local_model_directory_is_named_by_its_run_not_its_absolute_path(tmp_path, monkeypatch):
    """A finished SFT run as the starting model showed /tmp/.../runs/sft-s0/model in the "ours on" cell."""
    model = tmp_path / "runs" / "sft-s0" / "model"
    monkeypatch.chdir(tmp_path.parent)  # its runs/ lie below the working directory: shown from there
    assert model_label(str(model)) == f"{tmp_path.name}/runs/sft-s0/model"
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # not below it: the run directory's name
    assert model_label(str(model)) == "sft-s0/model"
    assert model_label(str(model.parent)) == "sft-s0"
    assert model_label("/data/ckpts/Qwen3-8B") == "Qwen3-8B"


def test_hub_ids_and_relative_paths_stay_as_written():
    assert model_label("Kwai-Klear/Klear-Reasoner-8B-SFT") == "Kwai-Klear/Klear-Reasoner-8B-SFT"
    assert model_label("runs/sft-s0") == "runs/sft-s0"


def test_a_sweep_from_a_local_run_shows_its_name_and_keeps_the_path_in_the_report(tmp_path, monkeypatch):
    model = tmp_path / "runs" / "sft-s0"
    spec = load_spec(write_spec(tmp_path, runner=DEFAULT_RUNNER, overrides=[f"model.name_or_path={model}"]))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    scale = scale_of(spec)
    assert scale.short == "sft-s0" and not scale.caution  # a real model: no warning colour
    assert scale.line.startswith(f"ours: from {model}, trained on ")
