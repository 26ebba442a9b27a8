"""ScoringPool: per-item timeout with kill-and-replace, errors, crashes, no leaked processes."""

from __future__ import annotations

import os
import pickle
import sys
import time

import pytest

from klear_lab.rewards import pool as pool_module
from klear_lab.rewards.math_check import warm_up
from klear_lab.rewards.pool import ScoringPool


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def slow_echo(item):
    """Test-only scoring function: ``hang`` sleeps, ``boom`` raises, ``die`` kills the worker."""
    if item == "hang":
        time.sleep(60)
    if item == "boom":
        raise ValueError("boom")
    if item == "die":
        os._exit(3)
    if item.startswith("slow"):
        time.sleep(1.0)
    return item.upper()


def hang_forever():
    """Test-only initializer that never returns."""
    time.sleep(600)


def loaded_modules(_item):
    """What a real math worker has imported after one item."""
    from klear_lab.rewards.math_check import equivalent_item

    equivalent_item(("\\boxed{1}", "1", 5.0))
    return {"torch": "torch" in sys.modules, "math_verify": "math_verify" in sys.modules}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_timeout_kills_and_replaces_the_worker():
    start = time.monotonic()
    with ScoringPool(slow_echo, workers=2, timeout_s=0.5) as pool:
        res = pool.map(["a", "hang", "b", "c"])
        first_pids = pool.pids
        again = pool.map(["d", "e"])  # the pool recovered
        all_pids = set(first_pids) | set(pool.pids)
    assert [r.status for r in res] == ["ok", "timeout", "ok", "ok"]
    assert [r.value for r in res] == ["A", None, "B", "C"]
    assert [r.value for r in again] == ["D", "E"]
    assert time.monotonic() - start < 10.0  # cut off, not the 60 s sleep (takes ~1.5 s)
    assert not any(_alive(pid) for pid in all_pids)


def test_error_and_crash_are_reported_per_item():
    with ScoringPool(slow_echo, workers=1, timeout_s=5.0) as pool:
        res = pool.map(["boom", "die", "ok"])
        pids = pool.pids
    assert (res[0].status, res[0].error) == ("error", "ValueError: boom")
    assert res[1].status == "error" and "worker died" in res[1].error
    assert (res[2].status, res[2].value) == ("ok", "OK")
    assert not any(_alive(pid) for pid in pids)


def test_closed_pool_refuses_and_copies_start_fresh():
    pool = ScoringPool(slow_echo, workers=1)
    assert pool.map([]) == [] and pool.pids == []  # lazy: nothing started
    clone = pickle.loads(pickle.dumps(pool))
    assert (clone.fn, clone.initializer, clone.workers, clone.timeout_s) == (slow_echo, None, 1, 5.0)
    pool.close()
    pool.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        pool.map(["a"])


def test_workers_are_torch_free():
    with ScoringPool(loaded_modules, initializer=warm_up, workers=1, timeout_s=30.0) as pool:
        (res,) = pool.map([None])
    assert res.status == "ok", res.error
    assert res.value == {"torch": False, "math_verify": True}


@pytest.mark.parametrize(("kwargs", "field"), [({"workers": 0}, "workers"), ({"timeout_s": 0}, "timeout_s")])
def test_bad_values_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        ScoringPool(slow_echo, **kwargs)


def test_a_map_that_raises_leaves_no_answer_for_the_next_one():
    """An item that cannot be sent raised out of ``map`` while another worker held an item; its late answer
    filled the next map's slot of the same index (a review got ``OLD`` for ``new``)."""
    with ScoringPool(slow_echo, workers=2, timeout_s=5.0) as pool:
        with pytest.raises(Exception, match="pickle|lambda"):
            pool.map(["slow-old", lambda: None])
        res = pool.map(["new"])
    assert (res[0].status, res[0].value) == ("ok", "NEW")


def test_a_worker_that_never_gets_ready_is_given_up(monkeypatch):
    """A hanging initializer made ``map`` wait for ever."""
    monkeypatch.setattr(pool_module, "BOOT_TIMEOUT_S", 1.0)
    start = time.monotonic()
    with ScoringPool(slow_echo, initializer=hang_forever, workers=1) as pool:
        with pytest.raises(RuntimeError, match="failed to start 3 times"):
            pool.map(["a"])
        pids = pool.pids
    assert time.monotonic() - start < 20
    assert not any(_alive(pid) for pid in pids)
