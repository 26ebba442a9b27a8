"""Arms, labels, Optuna parameter encoding, trial layers and the W&B sweep export."""

from __future__ import annotations

import optuna
import pytest
import yaml
from sweep_fixtures import write_spec

from klear_lab.errors import ConfigError
from klear_lab.sweep.axes import Axis
from klear_lab.sweep.grid import (
    Arm,
    arm_label,
    axis_distribution,
    canonical_point,
    decode,
    encode,
    grid_arms,
    nest,
    point_key,
    trial_layer,
)
from klear_lab.sweep.spec import load_spec
from klear_lab.sweep.wandb_export import wandb_sweep_config, write_wandb_sweep


def test_encode_roundtrip_and_point_keys():
    for value in ["ppo", 3, 0.5, None, True, [1, 2], {"name": "top_k", "k": 2}]:
        assert decode(encode(value)) == value
    assert point_key({"a": 1, "b": [1]}, 0) == point_key({"b": [1], "a": 1}, 0)
    assert point_key({"a": 1}, 0) != point_key({"a": 1}, 1)
    assert point_key({"a": 1.0, "b": [0.0, 2], "c": True}, 0) == point_key({"a": 1, "b": [0, 2.0], "c": True}, 0)
    assert point_key({"a": 0.5}, 0) != point_key({"a": 0}, 0) and point_key({"a": True}, 0) != point_key({"a": 1}, 0)


def test_point_keys_stored_by_earlier_versions_read_as_todays():
    old = '{"a": 1.0, "b": "json:[0.0, 2]", "run.seed": 0}'  # 1.0 and 0.0 were kept apart from 1 and 0
    assert canonical_point(old) == point_key({"a": 1, "b": [0, 2]}, 0)
    assert canonical_point(point_key({"a": 0.25}, 3)) == point_key({"a": 0.25}, 3)
    assert canonical_point(None) is None


def test_short_labels_fall_back_to_full_keys():
    axes = [Axis("rl.clip.name", ["ppo"], ["ppo"]), Axis("optim.lr", [0.1], ["0.1"])]
    assert arm_label(axes, {"rl.clip.name": "ppo", "optim.lr": 0.1}) == "clip=ppo,lr=0.1"
    clash = [Axis("a.k", [1], ["1"]), Axis("b.k", [2], ["2"])]
    assert arm_label(clash, {"a.k": 1, "b.k": 2}) == "a.k=1,b.k=2"


def test_nest_handles_component_shorthand():
    assert nest({"rl.clip.name": "gppo", "rl.clip.eps_high": 0.3}) == {
        "rl": {"clip": {"name": "gppo", "eps_high": 0.3}}}
    assert nest({"rl.clip": "gppo", "rl.clip.eps_high": 0.3}) == {
        "rl": {"clip": {"name": "gppo", "eps_high": 0.3}}}


def test_trial_layer_is_last_and_names_the_trial(tmp_path):
    spec = load_spec(write_spec(tmp_path, wandb={"project": "p"}))
    label, body = trial_layer(spec, {"optim.lr": 0.002}, 1, 7, 2, "lr=0.002")
    assert label == "sweep trial 7"
    assert body["optim"]["lr"] == 0.002 and body["run"]["seed"] == 1
    assert body["run"]["group"] == "toy" and body["run"]["job_type"] == "lr=0.002"
    assert body["run"]["tags"] == ["optim.lr=0.002", "sweep=toy"]  # the run adds seed:1 (one seed tag, not two)
    assert body["trainer"]["num_threads"] == 2 and body["tracking"]["wandb"]["project"] == "p"
    assert body["run"]["out_dir"].endswith("out/toy/runs")


def test_grid_order_last_axis_fastest(tmp_path):
    spec = load_spec(write_spec(tmp_path))
    spec.axes = [Axis("x", [1, 2], ["1", "2"]), Axis("y", ["a", "b"], ["a", "b"])]
    assert [a.label for a in grid_arms(spec)] == ["x=1,y=a", "x=1,y=b", "x=2,y=a", "x=2,y=b"]
    assert isinstance(grid_arms(spec)[0], Arm)


def test_wandb_export_grid(tmp_path):
    spec = load_spec(write_spec(tmp_path, seeds=(0, 1), overrides=["sft.max_steps=5"]))
    cfg = wandb_sweep_config(spec)
    assert cfg["method"] == "grid"
    assert cfg["metric"] == {"name": "val/acc", "goal": "maximize"}
    assert cfg["parameters"]["optim.lr"] == {"values": [0.001, 0.002, 0.003]}
    assert cfg["parameters"]["run.seed"] == {"values": [0, 1]}
    assert cfg["command"][1:3] == ["klear-lab", "train"] and cfg["command"][-1] == "${args_no_hyphens}"
    assert "sft.max_steps=5" in cfg["command"] and cfg["command"][3].endswith("exp.yaml")
    out = write_wandb_sweep(spec, tmp_path / "w.yaml")
    assert yaml.safe_load(out.read_text())["parameters"]["run.group"] == {"value": "toy"}


def test_wandb_export_tpe_ranges(tmp_path):
    spec = load_spec(write_spec(tmp_path, sampler="tpe", n_trials=5, pruner="hyperband",
                                axes={"optim.lr": {"low": 1e-4, "high": 1e-2, "log": True}}))
    cfg = wandb_sweep_config(spec)
    assert cfg["method"] == "bayes" and cfg["run_cap"] == 5
    assert cfg["parameters"]["optim.lr"] == {"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-2}
    assert cfg["early_terminate"]["type"] == "hyperband"


def test_an_axis_on_the_threads_is_kept_not_overwritten_by_the_sweeps_share(tmp_path):
    """A thread-scaling sweep: the arm labelled num_threads=1 ran on the sweep's cores // workers (2)."""
    spec = load_spec(write_spec(tmp_path))
    _, body = trial_layer(spec, {"trainer.num_threads": 1}, 0, 3, 2, "num_threads=1")
    assert body["trainer"]["num_threads"] == 1
    _, body = trial_layer(spec, {"optim.lr": 0.002}, 0, 4, 2, "lr=0.002")
    assert body["trainer"]["num_threads"] == 2


@pytest.mark.parametrize("key, axis", [
    ("sft.max_steps", {"low": 8, "high": 64, "log": True}),
    ("sft.max_steps", {"low": 2, "high": 10}),
    ("optim.lr", {"low": 1e-4, "high": 1e-2, "log": True}),
    ("optim.lr", {"low": 1e-4, "high": 1e-2}),
])
def test_the_wandb_export_draws_what_the_sweep_draws(tmp_path, key, axis):
    """W&B's own Optuna scheduler reads each exported range back as the sweep's distribution: an int log range
    was exported as int_uniform (its log scale lost)."""
    from wandb.sdk.sweeps.scheduler.optuna import sweep_parameter_to_distribution

    spec = load_spec(write_spec(tmp_path, sampler="tpe", n_trials=4, axes={key: axis}))
    exported = wandb_sweep_config(spec)["parameters"][key]
    assert sweep_parameter_to_distribution(exported) == axis_distribution(spec.axes[0])


@pytest.mark.parametrize("key, axis, values", [
    ("sft.max_steps", {"low": 1, "high": 9, "step": 2}, [1, 3, 5, 7, 9]),
    ("optim.lr", {"low": 0.0015, "high": 0.0095, "step": 0.002}, [0.0015, 0.0035, 0.0055, 0.0075, 0.0095]),
])
def test_a_stepped_range_is_exported_as_the_values_optuna_draws(tmp_path, key, axis, values):
    """W&B's q_uniform draws multiples of q (round(U(min, max) / q) * q): {2, 4, 6, 8} and 0 or 10 for the first
    axis, where Optuna draws 1, 3, ..., 9 (a review): a stepped range goes out as its values."""
    spec = load_spec(write_spec(tmp_path, sampler="random", n_trials=4, axes={key: axis}))
    assert wandb_sweep_config(spec)["parameters"][key] == {"values": values}
    dist = axis_distribution(spec.axes[0])
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    drawn = {study.ask({key: dist}).params[key] for _ in range(200)}
    assert sorted(drawn) == pytest.approx(values)  # every value drawn, and no other


def test_a_stepped_range_too_long_to_list_is_refused_by_the_export(tmp_path):
    spec = load_spec(write_spec(tmp_path, sampler="random", n_trials=4,
                                axes={"optim.lr": {"low": 0.0, "high": 1.0, "step": 0.0001}}))
    with pytest.raises(ConfigError, match=r"axes.optim.lr: --wandb-export: a stepped range of 10001 values"):
        wandb_sweep_config(spec)


def test_the_wandb_export_reads_a_specs_own_plugin_from_the_specs_directory(tmp_path, monkeypatch):
    """The agent runs from the working directory: a spec's relative plugin path is written relative to it."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "noop.py").write_text('"""Registers nothing."""\n')
    spec_path = write_spec(sub, overrides=["plugins=[noop.py]"])
    monkeypatch.chdir(tmp_path)
    command = wandb_sweep_config(load_spec(spec_path))["command"]
    assert 'plugins=["sub/noop.py"]' in command and command[3] == "sub/exp.yaml"


def test_a_starting_point_given_inside_a_model_mapping_is_read_from_the_specs_directory(tmp_path, monkeypatch):
    """``model={init_from: parent.yaml}`` stayed relative in the starting point's command and the W&B export."""
    sub = tmp_path / "sub"
    sub.mkdir()
    spec_path = write_spec(sub, overrides=["model={init_from: parent.yaml}"])
    monkeypatch.chdir(tmp_path)
    spec = load_spec(spec_path)
    assert spec.absolute_overrides() == [f'model={{"init_from": "{sub / "parent.yaml"}"}}']
    assert 'model={"init_from": "sub/parent.yaml"}' in wandb_sweep_config(spec)["command"]
