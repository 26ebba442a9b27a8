"""Torch threads of a run: explicit, or the cores this process may use divided by parallel workers."""

from __future__ import annotations

import os

import pytest
import torch

from klear_lab.builders import set_threads
from klear_lab.hardware import cpu_cores


@pytest.fixture
def restore_threads_and_affinity():
    threads, cpus = torch.get_num_threads(), os.sched_getaffinity(0)
    yield sorted(cpus)
    os.sched_setaffinity(0, cpus)
    torch.set_num_threads(threads)


def test_default_threads_follow_cpu_affinity_not_the_machine(restore_threads_and_affinity, monkeypatch):
    monkeypatch.delenv("KLEAR_PARALLEL_WORKERS", raising=False)
    os.sched_setaffinity(0, {restore_threads_and_affinity[0]})  # as under `taskset -c 0`
    assert cpu_cores() == 1
    assert set_threads({"trainer": {"num_threads": 0}}) == 1 == torch.get_num_threads()


def test_default_threads_divide_the_cores_among_sweep_workers(restore_threads_and_affinity, monkeypatch):
    monkeypatch.setattr("klear_lab.builders.cpu_cores", lambda: 8)
    monkeypatch.setenv("KLEAR_PARALLEL_WORKERS", "2")
    assert set_threads({"trainer": {"num_threads": 0}}) == 4 == torch.get_num_threads()
    monkeypatch.setenv("KLEAR_PARALLEL_WORKERS", "16")
    assert set_threads({"trainer": {"num_threads": 0}}) == 1


def test_explicit_threads_win(restore_threads_and_affinity, monkeypatch):
    monkeypatch.setenv("KLEAR_PARALLEL_WORKERS", "2")
    assert set_threads({"trainer": {"num_threads": 3}}) == 3 == torch.get_num_threads()
