"""Decontamination's stderr line is printed by a run's global rank 0 only: under multi-node DDP each node's local
rank 0 printed it too. The rank is read from the environment as Lightning reads it before its trainer sets ranks
(``RANK``, ``LOCAL_RANK``, ``SLURM_PROCID``, ``JSM_NAMESPACE_RANK``, the first set), with the node's rank."""

from __future__ import annotations

import pytest
from test_decontam_run import TRAIN, sft_config

from klear_lab import builders
from klear_lab.data.decontaminate import global_rank_zero

RANK_ENV = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK", "NODE_RANK", "GROUP_RANK", "SLURM_NODEID")


@pytest.fixture
def rank_env(monkeypatch):
    """Set the given rank variables, none of the others."""
    def set_env(**values: str) -> None:
        for name in RANK_ENV:
            monkeypatch.delenv(name, raising=False)
        for name, value in values.items():
            monkeypatch.setenv(name, value)
    return set_env


@pytest.mark.parametrize(("env", "zero"), [
    ({}, True),  # one process
    ({"LOCAL_RANK": "0"}, True), ({"LOCAL_RANK": "1"}, False),  # Lightning's launcher, one node
    ({"LOCAL_RANK": "0", "NODE_RANK": "0"}, True),
    ({"NODE_RANK": "1"}, False), ({"LOCAL_RANK": "0", "NODE_RANK": "1"}, False),  # its local rank 0 of node 1
    ({"RANK": "0", "LOCAL_RANK": "0", "GROUP_RANK": "0"}, True),  # torchrun
    ({"RANK": "4", "LOCAL_RANK": "0", "GROUP_RANK": "1"}, False),
    ({"SLURM_PROCID": "0"}, True), ({"SLURM_PROCID": "3"}, False),  # srun, a task per device
    ({"SLURM_PROCID": "0", "LOCAL_RANK": "2"}, False),  # Lightning's launcher inside a SLURM allocation
    ({"LOCAL_RANK": ""}, True),  # unset in effect, as distributed.local_rank reads it
    # a job script exporting LOCAL_RANK=$SLURM_LOCALID: the node's first task of node 1 is not rank 0
    ({"LOCAL_RANK": "0", "SLURM_PROCID": "8", "SLURM_NODEID": "1"}, False),
    ({"LOCAL_RANK": "0", "SLURM_PROCID": "0", "SLURM_NODEID": "0"}, True),
])
def test_the_global_rank_decides(rank_env, env, zero):
    rank_env(**env)
    assert global_rank_zero() is zero


def test_a_second_nodes_local_rank_zero_builds_the_same_records_silently(tmp_path, rank_env, capsys):
    cfg = sft_config(tmp_path, 9, TRAIN)
    rank_env(LOCAL_RANK="0", NODE_RANK="1", WORLD_SIZE="4")
    records, stats, _ = builders.build_run_records(cfg)
    assert stats["data/decontam_dropped"] == 2.0 and "dropped 2 of 4" not in capsys.readouterr().err
    rank_env(LOCAL_RANK="0", NODE_RANK="0", WORLD_SIZE="4")
    assert builders.build_run_records(cfg)[:2] == (records, stats)
    assert "dropped 2 of 4" in capsys.readouterr().err
