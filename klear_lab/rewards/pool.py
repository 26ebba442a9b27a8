"""A process pool for CPU-bound scoring with a hard per-item timeout (registers nothing).

math-verify's own timeouts use ``signal.alarm``: they only work in a main thread and cannot stop
a computation stuck inside C code. Each item therefore runs in the main thread of a worker
process, and the caller enforces a wall-clock deadline from outside: a worker that overruns is
killed (SIGKILL) and replaced, and its item gets ``status="timeout"``.

Workers are fresh interpreters (``subprocess``: fork+exec, safe when the parent has torch and its
threads loaded) talking over two pipes with ``multiprocessing.connection``. Unlike a
``spawn``/``forkserver`` multiprocessing child they do not re-run the parent's ``__main__``
script, so they import only this module and the scoring function's module (keep both torch-free).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

_MAX_BOOT_FAILURES = 3
BOOT_TIMEOUT_S = 120.0
"""A worker that has not reported ready this long after it started (its initializer hangs) is killed and
counts as a failed start."""


@dataclass(frozen=True)
class PoolResult:
    """Outcome of one item: ``status`` is ``ok``, ``timeout`` or ``error`` (exception, crash)."""

    status: str
    value: Any = None
    error: str = ""


_BOOT = (
    "import json, sys; sys.path[:0] = json.loads(sys.argv[3]); "
    "from klear_lab.rewards.pool import _serve_fds; _serve_fds(int(sys.argv[1]), int(sys.argv[2]))"
)


def _serve_fds(read_fd: int, write_fd: int) -> None:
    """Worker entry point: wrap the inherited pipe ends and serve."""
    inbox, outbox = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    fn, initializer = inbox.recv()  # pickled by reference: importing their modules happens here
    if initializer is not None:
        initializer()
    _serve(inbox, outbox, fn)


def _serve(inbox: Connection, outbox: Connection, fn: Callable[[Any], Any]) -> None:
    """Worker loop: announce readiness, then answer ``(idx, item)`` until ``None`` or EOF."""
    outbox.send(("ready", -1, None))
    while True:
        try:
            msg = inbox.recv()
        except EOFError:
            return
        if msg is None:
            return
        idx, item = msg
        try:
            outbox.send(("ok", idx, fn(item)))
        except Exception as exc:  # noqa: BLE001 - reported to the caller as an error result
            outbox.send(("error", idx, f"{type(exc).__name__}: {exc}"[:500]))


class _Worker:
    """One worker process, its two pipes and the item it is working on."""

    def __init__(self, fn: Callable[[Any], Any], initializer: Callable[[], None] | None) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        argv = [sys.executable, "-c", _BOOT, str(to_child_r), str(from_child_w), json.dumps(sys.path)]
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, pass_fds=(to_child_r, from_child_w))
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self.outbox = Connection(to_child_w, readable=False)
        self.conn = Connection(from_child_r, writable=False)
        self.ready = False
        self.started = time.monotonic()
        self.task: tuple[int, float] | None = None  # (item index, deadline)
        self._send((fn, initializer))

    def _send(self, obj: Any) -> None:
        with contextlib.suppress(OSError):  # a dead worker: its EOF is seen by the caller's wait()
            self.outbox.send(obj)

    def send(self, idx: int, item: Any, timeout_s: float) -> None:
        self._send((idx, item))
        self.task = (idx, time.monotonic() + timeout_s)

    def stop(self, grace_s: float = 1.0) -> None:
        """Ask the worker to exit; kill it if it does not within ``grace_s``."""
        if self.proc.poll() is None and self.task is None:
            self._send(None)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace_s)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.outbox.close()
        self.conn.close()


def _shutdown(workers: list[_Worker]) -> None:
    while workers:
        workers.pop().stop()


class ScoringPool:
    """Persistent worker processes mapping a picklable module-level ``fn`` over items.

    Args:
        fn: a module-level function (pickled by reference); it must not import torch.
        initializer: optional module-level function run once per worker before it reports
            ready (e.g. heavy imports), so that start-up does not count against an item's timeout.
        workers: number of worker processes, started lazily on the first ``map``.
        timeout_s: wall-clock limit per item, counted from when a ready worker receives it.
    """

    def __init__(
        self, fn: Callable[[Any], Any], *, initializer: Callable[[], None] | None = None,
        workers: int = 2, timeout_s: float = 5.0,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.fn, self.initializer, self.workers, self.timeout_s = fn, initializer, workers, timeout_s
        self._procs: list[_Worker] = []
        self._lock = threading.Lock()
        self._closed = False
        self._finalizer = weakref.finalize(self, _shutdown, self._procs)

    def __reduce__(self) -> tuple[Any, ...]:
        # a copy (pickle, deepcopy) is a fresh, not yet started pool with the same settings
        return (_rebuild, (self.fn, self.initializer, self.workers, self.timeout_s))

    def __enter__(self) -> ScoringPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pids(self) -> list[int]:
        """Process ids of the live workers (for tests and monitoring)."""
        return [w.proc.pid for w in self._procs]

    def close(self) -> None:
        """Stop every worker (idempotent); the pool cannot be used afterwards."""
        self._closed = True
        with self._lock:
            self._finalizer()

    def map(self, items: Sequence[Any]) -> list[PoolResult]:
        """Score ``items`` in parallel; results are in input order."""
        with self._lock:
            if self._closed:
                raise RuntimeError("ScoringPool is closed")
            if not items:
                return []
            while len(self._procs) < self.workers:
                self._procs.append(_Worker(self.fn, self.initializer))
            try:
                return self._map(items)
            except BaseException:
                # a worker still holding an item would answer it during the next map, into that
                # map's slot of the same index: replace every such worker before giving up
                for w in list(self._procs):
                    if w.task is not None:
                        w.proc.kill()
                        self._replace(w)
                raise

    def _map(self, items: Sequence[Any]) -> list[PoolResult]:
        results: list[PoolResult | None] = [None] * len(items)
        queue = deque(range(len(items)))
        boot_failures = 0
        while queue or any(w.task for w in self._procs):
            for w in self._procs:
                if w.ready and w.task is None and queue:
                    idx = queue.popleft()
                    w.send(idx, items[idx], self.timeout_s)
            boot_failures = self._collect(results, boot_failures)
            self._reap_overdue(results)
            boot_failures = self._reap_unready(boot_failures)
        return results  # type: ignore[return-value]

    def _collect(self, results: list[PoolResult | None], boot_failures: int) -> int:
        """Wait for messages until the nearest deadline; returns the updated boot-failure count."""
        deadlines = [w.task[1] for w in self._procs if w.task]
        wait_s = min([1.0, *(d - time.monotonic() for d in deadlines)])
        by_conn = {w.conn: w for w in self._procs}
        for conn in wait(list(by_conn), timeout=max(wait_s, 0.0)):
            w = by_conn[conn]
            try:
                status, idx, value = conn.recv()
            except (EOFError, OSError):
                boot_failures = self._on_crash(w, results, boot_failures)
                continue
            if status == "ready":
                w.ready, boot_failures = True, 0
            else:
                results[idx] = PoolResult(status, value if status == "ok" else None,
                                          value if status == "error" else "")
                w.task = None
        return boot_failures

    def _on_crash(self, w: _Worker, results: list[PoolResult | None], boot_failures: int) -> int:
        if w.task is not None:
            results[w.task[0]] = PoolResult("error", error=f"worker died (exit code {w.proc.wait()})")
            w.task = None
        elif not w.ready:
            boot_failures += 1
            if boot_failures >= _MAX_BOOT_FAILURES:
                raise RuntimeError(f"scoring worker failed to start {boot_failures} times in a row "
                                   f"(exit code {w.proc.wait()})")
        self._replace(w)
        return boot_failures

    def _reap_overdue(self, results: list[PoolResult | None]) -> None:
        now = time.monotonic()
        for w in list(self._procs):
            if w.task is not None and now >= w.task[1]:
                results[w.task[0]] = PoolResult("timeout", error=f"no result within {self.timeout_s:g} s")
                w.task = None
                w.proc.kill()
                self._replace(w)

    def _reap_unready(self, boot_failures: int) -> int:
        """Kill workers that never reported ready within :data:`BOOT_TIMEOUT_S` (a hanging initializer
        made ``map`` wait for ever); raises after :data:`_MAX_BOOT_FAILURES` in a row."""
        now = time.monotonic()
        for w in list(self._procs):
            if not w.ready and now - w.started >= BOOT_TIMEOUT_S:
                w.proc.kill()
                boot_failures = self._on_crash(w, [], boot_failures)
        return boot_failures

    def _replace(self, w: _Worker) -> None:
        w.task = None
        w.stop(grace_s=0.0)
        self._procs[self._procs.index(w)] = _Worker(self.fn, self.initializer)


def _rebuild(
    fn: Callable[[Any], Any], initializer: Callable[[], None] | None, workers: int, timeout_s: float
) -> ScoringPool:
    return ScoringPool(fn, initializer=initializer, workers=workers, timeout_s=timeout_s)
