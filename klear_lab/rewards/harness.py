"""Running a trusted harness over a candidate's tests in the sandbox, and reading its result lines back.

A harness (``function_tests``, ``stdio_tests``) is a program fed with the candidate and the test
*inputs* embedded as JSON. It defines the candidate, writes ``{"defined": true}`` (or a
``load_error``), then one JSON line per test, each as that test finishes, on a copy of its stdout
(``_out``; the candidate's own fd 2 goes to /dev/null). Expected outputs never enter the sandbox and
the host does the comparison, so a candidate cannot read the answers, and a line it forges on the
harness' pipe can only claim what it could have produced. A test with two result lines fails.

Each test runs under an alarm (``_arm()`` before, ``_disarm()`` after; over ``test_s`` raises
``_Timeout``). A candidate that catches it (``except:`` inside a loop) or blocks the alarm goes
silent; one that crashes the process (a segfault, ``os._exit``, the memory limit) ends it early.
Either way the host marks that test failed and runs the tests after it in a fresh sandbox
(:func:`run_harness`), as the official code, which runs each test as its own process, would.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from klear_lab.rewards.harness_lines import TEST_GRACE_S, next_line, over_time, shifted
from klear_lab.rewards.sandbox import SandboxLimits, run_python

PRELUDE = """import io, json, os, signal, sys
_P = json.loads(@PAYLOAD@)
_out = os.fdopen(os.dup(1), "w")
_null = os.open(os.devnull, os.O_WRONLY); os.dup2(_null, 1); os.dup2(_null, 2)
class _Timeout(BaseException):
    pass
def _on_alarm(*_):
    raise _Timeout()
signal.signal(signal.SIGALRM, _on_alarm)
def _arm():
    if _P["test_s"]:
        signal.setitimer(signal.ITIMER_REAL, _P["test_s"])
def _disarm():
    signal.setitimer(signal.ITIMER_REAL, 0)
def _emit(rec):
    try:
        line = json.dumps(rec, default=lambda o: {"__repr__": repr(o)[:200]})
    except Exception as e:
        line = json.dumps({"i": rec.get("i"), "err": "unserializable: " + type(e).__name__})
    _out.write(line + "\\n"); _out.flush()
"""


@dataclass(frozen=True)
class TestRun:
    """Per-test verdicts of one candidate.

    Attributes:
        passed: one bool per test, in order (tests not reached count as failed).
        status: ``ok``, ``timeout``, ``load_error`` (no such function, syntax error...) or
            ``crash`` (the process died during a test, or before reporting every test).
        info: a short reason (first error, timeout).
        wall_s: seconds the sandbox ran.
    """

    __test__ = False  # not a pytest class

    passed: tuple[bool, ...]
    status: str
    info: str
    wall_s: float


STALL_GRACE_S = 5.0
"""Seconds of start-up and scheduling slack on a loaded host, past the harness' own alarms, before a
silent run counts as one that ignores them."""

START_GRACE_S = 1.0
"""Seconds a fresh sandbox's harness may take to get going on a loaded host (compiling the program,
importing, reading the inputs; the sandbox's own start is not counted: ``run_python``): with a sandbox
per test, each test's share of the run's total limit (the official code's process per test has no total:
each test has its own), and what a run that ended early (a crash, ``os._exit``) adds to the total for the
fresh sandbox after it."""

FOUL = "wrote on the harness' result pipe"
"""Why every test of a run fails, and the tests after it, once a line there came out of order: only a
program that found the harness' pipe can write one, and once it has, which lines are the harness' own
cannot be told (forged in order, results for later tests skip those tests' runs). The run ends at once."""

PAYLOAD_BUDGET = 8 << 20
"""Bytes of test inputs (as JSON) embedded in one harness run; more are split over several runs. All
sixteen 10 MB stdins in one program (parsed, copied) died of the 1 GiB memory limit before the
candidate ran."""


@dataclass(frozen=True)
class HarnessRuns:
    """The result lines of one or more harness runs over one candidate's tests (indices over all tests)."""

    lines: list[dict[str, Any]]
    timed_out: bool
    returncode: int
    wall_s: float


def run_harness(harness: str, payload: dict[str, Any], key: str, timeout_s: float,
                limits: SandboxLimits | None, tests_per_run: int | None = None, fixed_total: bool = False,
                ) -> HarnessRuns:
    """Run ``harness`` over the tests ``payload[key]``, all within ``timeout_s``, at most ``tests_per_run``
    (None: as many as :data:`PAYLOAD_BUDGET` allows) in one sandbox.

    ``tests_per_run=1`` is the official code's process per test: nothing a test leaves behind reaches
    the next, and a program that finds the harness' internals cannot report results for tests it did not
    run, at the cost of a sandbox start per test.

    A candidate that catches the harness' per-test alarm would run on to ``timeout_s`` (35 s x 17 + 5 s =
    600 s for the paper's code reward), holding up the whole reward batch. So a run silent for one
    test limit plus :data:`STALL_GRACE_S` once the sandbox is up, or after its last line, is killed:
    that test times out, and the tests after it run in a fresh sandbox. A line out of order on the
    harness' pipe ends the run and fails the candidate's remaining tests (:data:`FOUL`). A run that ends before its
    last test's line (a crash; the harness leaving a test's stray threads behind; the host's output
    cap) runs the test it did not report again, first in a fresh sandbox (what earlier tests left, as
    memory, cannot fail it); ending early there too fails that test, and the next ones go on. Each such
    fresh sandbox adds :data:`START_GRACE_S` to ``timeout_s``, and each stall :data:`STALL_GRACE_S`, so
    that they do not eat the later tests' time, unless ``fixed_total`` (a total the user set). Neither
    counts a sandbox's own start, up to when it has the whole program: the host's time, not the candidate's.

    Only the next result line counts as a sign of life: a candidate writing anything else on the
    harness' pipe (it can reach it) is silent all the same. A test whose result line came more than
    :data:`~klear_lab.rewards.harness_lines.TEST_GRACE_S` past its limit after the line before fails as timed out
    (:func:`~klear_lab.rewards.harness_lines.over_time`).
    Inputs go :data:`PAYLOAD_BUDGET` bytes per run.
    """
    items, test_s = payload[key], payload["test_s"]
    deadline = time.monotonic() + timeout_s
    lines: list[dict[str, Any]] = []
    start, wall, returncode = 0, 0.0, 0
    while start < len(items):
        end = chunk_end(items, start, PAYLOAD_BUDGET, tests_per_run)
        source = harness.replace("@PAYLOAD@", repr(json.dumps({**payload, key: items[start:end]})))
        res = run_python(source, timeout_s=max(deadline - time.monotonic(), 0.01), limits=limits,
                         idle_s=test_s + STALL_GRACE_S if test_s else None, progress=next_line(end - start))
        wall, returncode = wall + res.wall_s, res.returncode
        deadline += res.ready_s or 0.0  # a sandbox's start is the host's time, not the candidate's (run_python)
        got = [shifted(rec, start) for rec in over_time(res.stdout, res.line_s, test_s, end - start, res.ready_s,
                                                        whole=tests_per_run == 1)]
        lines += got
        if not any("defined" in rec or "load_error" in rec for rec in got):
            if res.timed_out and not res.stalled:
                return HarnessRuns(lines, True, returncode, wall)
            why = (f"ignored its {test_s:g} s limit" if res.stalled else FOUL if res.fouled
                   else f"crashed (exit {res.returncode}): {res.stderr.strip()[-160:]}")
            return HarnessRuns([*lines, {"load_error": f"defining the solution {why}"}], False, returncode, wall)
        if any("load_error" in rec for rec in got):
            return HarnessRuns(lines, False, returncode, wall)
        if res.timed_out and not res.stalled:  # the whole run's limit
            return HarnessRuns(lines, True, returncode, wall)
        if res.fouled:  # which of its lines are the harness' cannot be told: none of the rest counts
            fouled = [{"i": k, "crash": f"{FOUL} (in tests {start}-{end - 1})"} for k in range(start, len(items))]
            return HarnessRuns(lines[:-len(got) or None] + fouled, False, returncode, wall)
        done = max([rec["i"] + 1 for rec in got if "i" in rec], default=start)  # in [start, end]: own_keys
        if done >= end:
            start = end
            continue
        if not fixed_total:  # the next run: a fresh sandbox, after a stall or not
            deadline += STALL_GRACE_S if res.stalled else START_GRACE_S
        if not res.stalled and done > start:
            start = done  # ended early after other tests: run this one again, first in a fresh sandbox
            continue
        cause = f"its output passed the {res.stdout_cap >> 20} MB cap" if res.stdout_full else f"exit {res.returncode}"
        lines.append({"i": done, "timeout": True} if res.stalled else {"i": done, "crash": f"{cause} in test {done}"})
        start = done + 1
        if start < len(items) and deadline - time.monotonic() <= 0:
            return HarnessRuns(lines, True, returncode, wall)
    return HarnessRuns(lines, False, returncode, wall)


def total_limit_s(test_s: float, n: int, tests_per_run: int | None) -> float:
    """The default limit of a harness over ``n`` tests of ``test_s`` each: every test's limit, one more for
    defining the solution and room to find one stall (a test that ignores its alarm is killed after
    :data:`STALL_GRACE_S`; :func:`run_harness` adds as much for the next); with a sandbox per test, each
    test's whole allowance by the host's clock (:data:`TEST_GRACE_S`) and a sandbox start, so that starts
    do not eat the last tests' time."""
    if tests_per_run == 1:
        return n * (test_s * 1.1 + TEST_GRACE_S + START_GRACE_S)
    return test_s * (n + 1) + STALL_GRACE_S


def chunk_end(items: Sequence[Any], start: int, budget: int, most: int | None = None) -> int:
    """The end of the run of items from ``start`` whose JSON fits ``budget`` bytes (at least one item, at
    most ``most``)."""
    end, used = start, 0
    while end < len(items) and (most is None or end - start < most):
        used += len(json.dumps(items[end]))
        if used > budget and end > start:
            break
        end += 1
    return end


def verdicts(res: HarnessRuns, timeout_s: float, test_timeout_s: float | None, n: int,
             check: Callable[[int, dict[str, Any]], bool]) -> TestRun:
    """Per-test verdicts from the harness' result lines (``check(i, line)``: test ``i`` passed); a test
    reported twice fails. The status: a load error, a timeout (of the run or of a test), a process
    that died in a test or before reporting every test, or ok."""
    passed, info, seen, slow, crashed = [False] * n, "", set(), [], []
    for rec in res.lines:
        if "load_error" in rec:
            return TestRun(tuple(passed), "load_error", str(rec["load_error"])[:200], res.wall_s)
        i = rec.get("i")
        if not (isinstance(i, int) and 0 <= i < n):
            continue
        passed[i] = i not in seen and "timeout" not in rec and "crash" not in rec and check(i, rec)
        seen.add(i)
        if "timeout" in rec:
            slow.append(i)
        elif "crash" in rec:
            crashed.append(str(rec["crash"]))
        elif "err" in rec and not info:
            info = str(rec["err"])
    status = "ok"
    if res.timed_out:
        status, info = "timeout", f"timed out after {timeout_s:g} s"
    elif len(seen) < n:
        status, info = "crash", f"exit {res.returncode} after {len(seen)}/{n} tests"
    elif slow:
        status, info = "timeout", f"{len(slow)} test(s) over {test_timeout_s:g} s (first: test {slow[0]})"
    elif crashed:
        status, info = "crash", f"{len(crashed)} test(s) crashed (first: {crashed[0]})"
    return TestRun(tuple(passed), status, info[:200], res.wall_s)
