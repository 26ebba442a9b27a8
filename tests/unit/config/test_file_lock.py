"""``exclusive_lock``: the lock file goes away with the lock, and removing it never lets two processes in."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from klear_lab.file_lock import exclusive_lock


def test_the_lock_file_is_removed_after_the_block_and_after_an_error(tmp_path):
    path = tmp_path / ".init-abc.lock"
    with exclusive_lock(path):
        assert path.is_file()
    assert not path.exists()
    with pytest.raises(KeyboardInterrupt), exclusive_lock(path):
        raise KeyboardInterrupt
    assert not path.exists()


def _count(path: str, counter: str, rounds: int, started) -> None:
    """Increment the number in ``counter`` ``rounds`` times, each read-then-write under the lock."""
    from pathlib import Path

    started.wait()
    for _ in range(rounds):
        with exclusive_lock(Path(path)):
            value = int(Path(counter).read_text())
            os.sched_yield()  # let another process reach the lock file in between
            Path(counter).write_text(str(value + 1))


def test_processes_that_remove_the_file_never_hold_the_lock_at_once(tmp_path):
    """Each holder removes the file as it releases it while others wait on it: a waiter that locked a
    removed file must not go on, or two processes would read the same count and one increment be lost."""
    counter = tmp_path / "counter"
    counter.write_text("0")
    ctx = multiprocessing.get_context("spawn")
    started = ctx.Event()
    procs = [ctx.Process(target=_count, args=(str(tmp_path / "x.lock"), str(counter), 150, started))
             for _ in range(3)]
    for p in procs:
        p.start()
    started.set()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert counter.read_text() == "450"
    assert not (tmp_path / "x.lock").exists()


def test_on_wait_is_called_once_when_another_process_holds_it(tmp_path):
    path = tmp_path / "x.lock"
    ctx = multiprocessing.get_context("spawn")
    held, waits = ctx.Event(), []
    proc = ctx.Process(target=_hold_for, args=(str(path), held, 1.0))
    proc.start()
    assert held.wait(60)
    with exclusive_lock(path, on_wait=lambda: waits.append(1)):
        assert (tmp_path / "released").exists()  # it held the lock until it let go
    proc.join(60)
    assert waits == [1] and proc.exitcode == 0


def _hold_for(path: str, held, seconds: float) -> None:
    import time
    from pathlib import Path

    with exclusive_lock(Path(path)):
        held.set()
        time.sleep(seconds)
        Path(path).with_name("released").touch()


def test_lock_if_free_holds_a_free_lock_and_passes_a_held_one_by_at_once(tmp_path):
    """What a ``klear-lab train`` takes on its own config: held where free; where another holds it, the
    block runs at once holding nothing, and the holder's file is left to it."""
    from klear_lab.file_lock import lock_if_free

    path = tmp_path / ".init-abc-s0.lock"
    with lock_if_free(path) as held:
        assert held and path.is_file()
        with lock_if_free(path) as second:  # another open file description: flock refuses it, as another process
            assert not second
        assert path.is_file()  # still the holder's
    assert not path.exists()
    with exclusive_lock(path), lock_if_free(path) as held:
        assert not held
