"""Device and process counting for DDP runs, and what depends on it (threads, refusals)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from klear_lab import builders
from klear_lab.config.compose import compose
from klear_lab.distributed import device_count, exported_run_dir, joined_run_dir, local_processes
from klear_lab.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("devices", "count"), [(1, 1), (2, 2), ("2", 2), ("0,1", 2), ("1,", 1), ([0, 1], 2),
                                                ([3], 1), ("auto", max(torch.cuda.device_count(), 1))])
def test_device_count(devices, count):
    assert device_count({"devices": devices, "accelerator": "auto"}) == count


def test_cpu_processes_share_the_runs_threads(monkeypatch):
    monkeypatch.setattr("klear_lab.hardware.cpu_cores", lambda: 8)
    monkeypatch.delenv("KLEAR_PARALLEL_WORKERS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        cpu = {"accelerator": "cpu", "devices": 2}
        assert local_processes(cpu) == 2
        assert builders.set_threads({"trainer": {**cpu, "num_threads": 0}}) == 4
        assert builders.set_threads({"trainer": {**cpu, "num_threads": 6}}) == 3  # a sweep's share, split
        monkeypatch.setenv("KLEAR_PARALLEL_WORKERS", "2")
        assert builders.set_threads({"trainer": {**cpu, "num_threads": 0}}) == 2
        assert builders.set_threads({"trainer": {"accelerator": "gpu", "devices": 2, "num_threads": 6}}) == 6
    finally:
        torch.set_num_threads(before)


def test_only_a_relaunched_rank_joins(monkeypatch, tmp_path):
    monkeypatch.delenv("KLEAR_RUN_DIR", raising=False)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert joined_run_dir() is None  # no run to join
    with exported_run_dir(tmp_path):
        assert joined_run_dir() == tmp_path
        monkeypatch.setenv("LOCAL_RANK", "0")
        assert joined_run_dir() is None  # rank 0 owns the run
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert joined_run_dir() is None  # the variable is gone after the run


def test_vllm_evaluation_on_several_devices_is_refused():
    cfg = compose(None, ["run.kind=sft", "eval.engine=rollout", "rl.rollout.name=vllm", "trainer.devices=2"])
    with pytest.raises(ConfigError, match="every rank would start its own engine"):
        builders.eval_engine(cfg)


@pytest.mark.parametrize("strategy", ["ddp_spawn", "ddp_fork", "ddp_notebook"])
def test_sft_ranks_started_from_inside_the_process_are_refused(strategy):
    """Spawned ranks trained, then the run failed in the CSV logger at the end (their metrics never
    reached the parent): refused before any data is read, naming the key."""
    sft = ROOT / "experiments/quickstart/sft.yaml"
    with pytest.raises(ConfigError, match=rf"trainer.strategy is '{strategy}' with trainer.devices=2: .*"
                                          r"use trainer.strategy=ddp"):
        compose(sft, ["trainer.accelerator=cpu", "trainer.devices=2", f"trainer.strategy={strategy}"])
    compose(sft, ["trainer.accelerator=cpu", "trainer.devices=1", f"trainer.strategy={strategy}"])  # one process
    compose(sft, ["trainer.accelerator=cpu", "trainer.devices=2", "trainer.strategy=ddp"])


def test_sft_auto_strategy_on_several_devices_is_refused_in_an_interactive_session(monkeypatch):
    sft, overrides = ROOT / "experiments/quickstart/sft.yaml", ["trainer.accelerator=cpu", "trainer.devices=2"]
    compose(sft, overrides)  # a script or the CLI: Lightning runs the command again per rank
    monkeypatch.setattr(sys, "ps1", ">>> ", raising=False)
    with pytest.raises(ConfigError, match=r"trainer.strategy is 'auto' .* in an interactive session"):
        compose(sft, overrides)
    compose(sft, [*overrides, "trainer.strategy=ddp"])


def test_auto_strategy_on_several_devices_is_refused_in_an_interactive_session(monkeypatch):
    """Jupyter/IPython: Lightning would fork the ranks (ddp_fork), and RL ranks re-run the command instead."""
    from klear_lab.distributed import multi_device_rl_problem

    cfg = compose(ROOT / "experiments/quickstart/rl.yaml", ["trainer.devices=2", "trainer.accelerator=cpu"])
    assert multi_device_rl_problem(cfg) is None  # a script or the CLI: Lightning re-runs the command per rank
    monkeypatch.setattr(sys, "ps1", ">>> ", raising=False)
    assert "interactive session" in multi_device_rl_problem(cfg)
    assert multi_device_rl_problem(compose(ROOT / "experiments/quickstart/rl.yaml", [
        "trainer.devices=2", "trainer.accelerator=cpu", "trainer.strategy=ddp"])) is None


@pytest.mark.parametrize("kind", ["sft", "rl"])
def test_a_trainer_lightning_refuses_stops_before_the_run_directory(tmp_path, kind):
    """FSDP needs a GPU: Lightning says so when the Trainer is made; the run says so before writing anything."""
    from klear_lab.run import run_experiment

    out = tmp_path / "runs"
    cfg = compose(ROOT / f"experiments/quickstart/{kind}.yaml", [
        f"run.out_dir={out}", "model.init_from=null", "trainer.accelerator=cpu", "trainer.strategy=fsdp"])
    with pytest.raises(ConfigError, match=r"trainer.accelerator='cpu' trainer.devices=1 trainer.strategy='fsdp' "
                                          r"trainer.precision='32-true': Lightning cannot train .*requires a GPU"):
        run_experiment(cfg)
    assert not out.exists()
