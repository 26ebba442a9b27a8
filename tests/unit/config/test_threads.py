"""Torch threads of a run: explicit, or the cores this process may use divided by parallel workers."""

from __future__ import annotations

import os

import pytest
import torch

from klear_lab.builders import set_threads
from klear_lab.hardware import cpu_cores


@pytest.fixture(autouse=True)
def _no_user_cap(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


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
    monkeypatch.setattr("klear_lab.hardware.cpu_cores", lambda: 8)
    monkeypatch.setenv("KLEAR_PARALLEL_WORKERS", "2")
    assert set_threads({"trainer": {"num_threads": 0}}) == 4 == torch.get_num_threads()
    monkeypatch.setenv("KLEAR_PARALLEL_WORKERS", "16")
    assert set_threads({"trainer": {"num_threads": 0}}) == 1


def test_explicit_threads_win(restore_threads_and_affinity, monkeypatch):
    monkeypatch.setenv("KLEAR_PARALLEL_WORKERS", "2")
    assert set_threads({"trainer": {"num_threads": 3}}) == 3 == torch.get_num_threads()


def test_the_users_omp_num_threads_caps_the_automatic_count(restore_threads_and_affinity, monkeypatch):
    """``OMP_NUM_THREADS=1`` was ignored: runs and sweep trials took cores // workers threads anyway."""
    from klear_lab.sweep.worker import threads_per_trial

    monkeypatch.setattr("klear_lab.hardware.cpu_cores", lambda: 8)
    monkeypatch.delenv("KLEAR_PARALLEL_WORKERS", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert set_threads({"trainer": {"num_threads": 0}}) == 3 == torch.get_num_threads()
    assert threads_per_trial(2, 0) == 3 and threads_per_trial(4, 0) == 2 and threads_per_trial(2, 5) is None
    assert set_threads({"trainer": {"num_threads": 6}}) == 6  # an explicit count still wins
    for ignored in ("0", "", "two"):
        monkeypatch.setenv("OMP_NUM_THREADS", ignored)
        assert set_threads({"trainer": {"num_threads": 0}}) == 8
