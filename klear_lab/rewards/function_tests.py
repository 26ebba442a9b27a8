"""Run a candidate function against ``{"input": [...], "output": ...}`` tests in ONE sandbox process.

The trusted harness (fed on stdin with the candidate and the test *inputs* embedded as JSON)
defines the candidate in a fresh namespace, calls ``func(*input)`` per test and streams one JSON
line per test with the returned value. Expected outputs never enter the sandbox and the host does
the comparison, so a candidate cannot read the answers (e.g. through ``sys._getframe``), and an
object with a forged ``__eq__`` cannot pass. A line the candidate forges on the harness' output
can only claim values it could have returned; a test with two result lines fails. Lines are
written as each test finishes: a timeout keeps the tests done so far.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from klear_lab.rewards.sandbox import LINE_HEAD, SandboxLimits, run_python

# both harnesses: the payload, the real stdout kept as ``_out`` for result lines only (the
# candidate's own fd 1 and 2 go to /dev/null), and a per-test alarm: ``_arm()`` before a test,
# ``_disarm()`` after it; a test over ``test_s`` raises ``_Timeout``. A candidate that catches it
# (``except:`` inside a loop) or blocks the alarm goes silent: the host kills the run and runs the
# tests after that one in a fresh sandbox (``_run_harness``)
_PRELUDE = """import io, json, os, signal, sys
_P = json.loads({payload!r})
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
"""

_HARNESS = _PRELUDE + """def _emit(rec):
    try:
        line = json.dumps(rec, default=lambda o: {{"__repr__": repr(o)[:200]}})
    except Exception as e:
        line = json.dumps({{"i": rec.get("i"), "err": "unserializable: " + type(e).__name__}})
    _out.write(line + "\\n"); _out.flush()
try:
    _ns = {{"__name__": "solution"}}
    _arm()
    try:
        exec(compile(_P["code"], "solution.py", "exec"), _ns)
    finally:
        _disarm()
    _fn = _ns[_P["func"]]
    _emit({{"defined": True}})
except _Timeout:
    _emit({{"load_error": "timed out defining the solution"}}); os._exit(0)
except BaseException as e:
    _emit({{"load_error": type(e).__name__ + ": " + str(e)[:200]}}); os._exit(0)
for _i, _args in enumerate(_P["inputs"]):
    _rec = {{"i": _i}}
    try:
        _arm()
        try:
            _rec["out"] = _fn(*_args)
        finally:
            _disarm()
    except _Timeout:
        _rec = {{"i": _i, "timeout": True}}
    except BaseException as e:
        _rec = {{"i": _i, "err": type(e).__name__ + ": " + str(e)[:200]}}
    _emit(_rec)
"""


@dataclass(frozen=True)
class TestRun:
    """Per-test verdicts of one candidate.

    Attributes:
        passed: one bool per test, in order (tests not reached count as failed).
        status: ``ok``, ``timeout``, ``load_error`` (no such function, syntax error...) or
            ``crash`` (the process died before reporting every test).
        info: a short reason (first error, timeout).
        wall_s: seconds the sandbox ran.
    """

    __test__ = False  # not a pytest class

    passed: tuple[bool, ...]
    status: str
    info: str
    wall_s: float


def outputs_match(got: Any, expected: Any) -> bool:
    """JSON-value equality: floats within 1e-6 (relative), bools distinct from ints, tuples as lists."""
    if isinstance(got, bool) or isinstance(expected, bool):
        return type(got) is type(expected) and got == expected
    if isinstance(got, (int, float)) and isinstance(expected, (int, float)):
        if isinstance(got, float) or isinstance(expected, float):
            return math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-9)
        return got == expected
    if isinstance(got, list) and isinstance(expected, (list, tuple)):
        return len(got) == len(expected) and all(map(outputs_match, got, expected))
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == {str(k) for k in expected} and all(
            outputs_match(got[str(k)], v) for k, v in expected.items())
    return type(got) is type(expected) and got == expected


def run_function_tests(
    code: str, func: str, tests: Sequence[dict[str, Any]], *, timeout_s: float,
    test_timeout_s: float | None = None, limits: SandboxLimits | None = None,
) -> TestRun:
    """Define ``code`` in the sandbox and check ``func(*test["input"]) == test["output"]`` per test.

    Args:
        code: candidate program (defines ``func``).
        func: name of the function under test.
        tests: test cases; ``input`` is the positional-argument list.
        timeout_s: wall-clock limit for the whole run (all tests).
        test_timeout_s: limit per test (and for defining the solution); a test over it fails and the
            next one runs. None: only ``timeout_s``.
        limits: sandbox resource limits.

    Raises:
        RuntimeError: bwrap is missing or the sandbox failed to start.
    """
    payload = {"code": code, "func": func, "inputs": [list(t["input"]) for t in tests], "test_s": test_timeout_s}
    res = _run_harness(_HARNESS, payload, "inputs", timeout_s, limits)
    return _verdicts(res, timeout_s, test_timeout_s, len(tests),
                     lambda i, rec: "out" in rec and _matches(rec["out"], tests[i]["output"]))


STALL_GRACE_S = 5.0
"""Seconds of start-up and scheduling slack on a loaded host, past the harness' own alarms, before a
silent run counts as one that ignores them."""

TEST_GRACE_S = 1.0
"""Seconds past the per-test limit (and 10 % of it, for a loaded host's pipe and scheduling delays) that a
test may take by the host's clock (the time between its result line and the one before) before it fails
as over the limit, whatever its line says: the limit inside the sandbox is an alarm, which the program
can ignore (a review passed tests 5 s over a 2 s limit)."""


@dataclass(frozen=True)
class HarnessRuns:
    """The result lines of one or more harness runs over one candidate's tests (indices over all tests)."""

    lines: list[dict[str, Any]]
    timed_out: bool
    returncode: int
    wall_s: float


def _run_harness(harness: str, payload: dict[str, Any], key: str, timeout_s: float,
                 limits: SandboxLimits | None) -> HarnessRuns:
    """Run ``harness`` over the tests ``payload[key]``, all within ``timeout_s``.

    A candidate that catches the harness' per-test alarm would run on to ``timeout_s`` (35 s x 17 =
    595 s for the paper's code reward), holding up the whole reward batch. The harness writes a line
    once the solution is defined and after each test, each phase under the alarm, so a run silent for
    one test limit plus :data:`STALL_GRACE_S` once the sandbox is up, or after its last line, is killed: that test
    times out and the tests after it run in a fresh sandbox (a few seconds later than had the alarm
    worked). Only the next result line counts as a sign of life: a candidate writing anything else on
    the harness' pipe (it can reach it) is silent all the same. A test whose result line came more than
    :data:`TEST_GRACE_S` past its limit after the line before fails as timed out (``_over_time``).
    """
    items, test_s = payload[key], payload["test_s"]
    deadline = time.monotonic() + timeout_s
    lines: list[dict[str, Any]] = []
    start, wall = 0, 0.0
    while True:
        left = deadline - time.monotonic()
        res = run_python(harness.format(payload=json.dumps({**payload, key: items[start:]})), timeout_s=max(left, 0.01),
                         limits=limits, idle_s=test_s + STALL_GRACE_S if test_s else None, progress=_next_line())
        wall += res.wall_s
        got = [_shifted(rec, start) for rec in _over_time(res.stdout, res.line_s, test_s)]
        lines += got
        if not res.stalled:
            return HarnessRuns(lines, res.timed_out, res.returncode, wall)
        if not any("defined" in rec or "load_error" in rec for rec in got):
            lines.append({"load_error": f"defining the solution ignored its {test_s:g} s limit"})
            return HarnessRuns(lines, False, res.returncode, wall)
        stuck = max([rec["i"] + 1 for rec in got if isinstance(rec.get("i"), int)], default=start)
        lines.append({"i": stuck, "timeout": True})
        start = stuck + 1
        if start >= len(items) or deadline - time.monotonic() <= 0:
            return HarnessRuns(lines, start < len(items), res.returncode, wall)


_HEAD = re.compile(r'\{"(?:i": (\d+)[,}]|defined": |load_error": )')
"""The start of a harness line (``json.dumps`` of a dict whose first key is ``i``, ``defined`` or ``load_error``)."""


class _ResultOrder:
    """The harness' lines in the order it writes them: the first ``defined`` (or ``load_error``) line, then
    test 0's result, test 1's...; a forged, repeated or skipped one is out of order."""

    def __init__(self) -> None:
        self.expected = -1  # -1: the solution is not defined yet; then the next test's index

    def next(self, head: str) -> int | None:
        """The step a line (its head) takes (-1: defined, i: test i's result), or None if out of order."""
        match = _HEAD.match(head)
        step = None if match is None else -1 if match.group(1) is None else int(match.group(1))
        if step is None or step != self.expected:
            return None
        self.expected += 1
        return step


def _next_line() -> Callable[[bytes], bool]:
    """Whether a harness line (its head) moves the run on: the next line in :class:`_ResultOrder`."""
    order = _ResultOrder()
    return lambda head: order.next(head.decode("utf-8", "replace")) is not None


def _over_time(stdout: str, line_s: Sequence[float], test_s: float | None) -> list[dict[str, Any]]:
    """The result lines of one run, with each test whose line came over ``test_s`` + :data:`TEST_GRACE_S`
    after the line before it in :class:`_ResultOrder` (by the host's clock: ``line_s``) made a timeout."""
    records, before, order = [], None, _ResultOrder()
    for k, line in enumerate(stdout.split("\n")[:-1]):  # whole lines; json never holds a raw \n
        rec, at = _parse(line), line_s[k] if k < len(line_s) else None
        step = order.next(line[:LINE_HEAD])
        if step is not None:  # in order: a forged line must not restart a test's clock
            if step >= 0 and test_s and None not in (at, before) and at - before > test_s * 1.1 + TEST_GRACE_S:
                rec = {"i": step, "timeout": True}
            before = at
        records.append(rec)
    return records


def _shifted(rec: dict[str, Any], start: int) -> dict[str, Any]:
    """A result line of a run that began at test ``start``, indexed over all tests."""
    i = rec.get("i")
    return {**rec, "i": i + start} if isinstance(i, int) and not isinstance(i, bool) else rec


def _verdicts(res: HarnessRuns, timeout_s: float, test_timeout_s: float | None, n: int, check: Any) -> TestRun:
    """Per-test verdicts from the harness' result lines (``check(i, line)``: test ``i`` passed); a test
    reported twice fails. The status: a load error, a timeout (of the run or of a test), a process
    that died before reporting every test, or ok."""
    passed, info, seen, slow = [False] * n, "", set(), []
    for rec in res.lines:
        if "load_error" in rec:
            return TestRun(tuple(passed), "load_error", str(rec["load_error"])[:200], res.wall_s)
        i = rec.get("i")
        if not (isinstance(i, int) and 0 <= i < n):
            continue
        passed[i] = i not in seen and "timeout" not in rec and check(i, rec)
        seen.add(i)
        if "timeout" in rec:
            slow.append(i)
        elif "err" in rec and not info:
            info = str(rec["err"])
    status = "ok"
    if res.timed_out:
        status, info = "timeout", f"timed out after {timeout_s:g} s"
    elif len(seen) < n:
        status, info = "crash", f"exit {res.returncode} after {len(seen)}/{n} tests"
    elif slow:
        status, info = "timeout", f"{len(slow)} test(s) over {test_timeout_s:g} s (first: test {slow[0]})"
    return TestRun(tuple(passed), status, info[:200], res.wall_s)


def _matches(got: Any, expected: Any) -> bool:
    """A verdict for any value the program returned: one that cannot be compared fails its test (a forged
    line nested deeper than any expected output; an int too large for a float: ``10**400`` vs 2.5)."""
    try:
        return outputs_match(got, expected)
    except (RecursionError, OverflowError, ValueError, TypeError):
        return False


def _parse(line: str) -> dict[str, Any]:
    """One harness line; anything else the program wrote there (say, nested past the parser's depth) is ``{}``."""
    try:
        rec = json.loads(line)
    except (ValueError, RecursionError):
        return {}
    return rec if isinstance(rec, dict) else {}


_STDIO_HARNESS = _PRELUDE + """try:
    _code = compile(_P["code"], "solution.py", "exec")
except BaseException as e:
    _out.write(json.dumps({{"load_error": type(e).__name__ + ": " + str(e)[:200]}}) + "\\n"); _out.flush()
    os._exit(0)
_out.write(json.dumps({{"defined": True}}) + "\\n"); _out.flush()
for _i, _data in enumerate(_P["stdins"]):
    sys.stdin = io.TextIOWrapper(io.BytesIO(_data.encode()), encoding="utf-8")
    sys.stdout = _cap = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    _rec = {{"i": _i}}
    try:
        _arm()
        try:
            exec(_code, {{"__name__": "__main__"}})
        finally:
            _disarm()
    except _Timeout:
        _rec["timeout"] = True
    except SystemExit as e:
        if e.code not in (None, 0):
            _rec["err"] = "exit " + str(e.code)[:50]
    except BaseException as e:
        _rec["err"] = type(e).__name__ + ": " + str(e)[:200]
    try:
        _cap.flush()
        _rec["out"] = _cap.buffer.getvalue().decode("utf-8", "replace")
    except BaseException as e:
        _rec["err"] = "output: " + type(e).__name__
    sys.stdout = sys.__stdout__
    _out.write(json.dumps(_rec) + "\\n"); _out.flush()
"""


def stdout_matches(got: Any, expected: str) -> bool:
    """Program output against an expected stdout, as competitive-programming judges compare: line by
    line, trailing whitespace and trailing blank lines ignored."""
    if not isinstance(got, str):
        return False

    def lines(text: str) -> list[str]:
        out = [line.rstrip() for line in text.splitlines()]
        while out and not out[-1]:
            out.pop()
        return out

    return lines(got) == lines(expected)


def run_stdio_tests(code: str, tests: Sequence[dict[str, Any]], *, timeout_s: float,
                    test_timeout_s: float | None = None, limits: SandboxLimits | None = None) -> TestRun:
    """Run ``code`` as a whole program once per ``{"stdin": str, "stdout": str}`` test (verl/LiveCodeBench
    style), all in one sandbox process: a fresh ``__main__`` namespace per test reading ``stdin``; its
    output is compared on the host (:func:`stdout_matches`). ``exit()``/``sys.exit(0)`` ends a test
    normally; another exit code fails it. Timeouts as :func:`run_function_tests`."""
    payload = {"code": code, "stdins": [t["stdin"] for t in tests], "test_s": test_timeout_s}
    res = _run_harness(_STDIO_HARNESS, payload, "stdins", timeout_s, limits)
    return _verdicts(res, timeout_s, test_timeout_s, len(tests),
                     lambda i, rec: "err" not in rec and stdout_matches(rec.get("out"), tests[i]["stdout"]))
