"""Run a candidate function against ``{"input": [...], "output": ...}`` tests in ONE sandbox process.

The trusted harness (:mod:`klear_lab.rewards.harness`) defines the candidate in a fresh namespace,
calls ``func(*input)`` per test and streams one JSON line per test with the returned value. Expected
outputs never enter the sandbox and the host does the comparison, so a candidate cannot read the
answers (e.g. through ``sys._getframe``), and an object with a forged ``__eq__`` cannot pass.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from klear_lab.rewards.harness import PRELUDE, TestRun, run_harness, verdicts
from klear_lab.rewards.sandbox import SandboxLimits

__all__ = ["TestRun", "outputs_match", "run_function_tests"]

_HARNESS = PRELUDE + """try:
    _ns = {"__name__": "solution"}
    _arm()
    try:
        exec(compile(_P["code"], "solution.py", "exec"), _ns)
    finally:
        _disarm()
    _fn = _ns.get(_P["func"])
    if not callable(_fn):
        raise NameError("the solution defines no function " + repr(_P["func"]))
    _emit({"defined": True})
except _Timeout:
    _emit({"load_error": "timed out defining the solution"}); os._exit(0)
except BaseException as e:
    _emit({"load_error": type(e).__name__ + ": " + str(e)[:200]}); os._exit(0)
for _i, _args in enumerate(_P["inputs"]):
    _rec = {"i": _i}
    try:
        _arm()
        try:
            _rec["out"] = _fn(*_args)
        finally:
            _disarm()
    except _Timeout:
        _rec = {"i": _i, "timeout": True}
    except BaseException as e:
        _rec = {"i": _i, "err": type(e).__name__ + ": " + str(e)[:200]}
    _emit(_rec)
"""


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
    test_timeout_s: float | None = None, limits: SandboxLimits | None = None, tests_per_run: int | None = None,
    fixed_total: bool = False,
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
        tests_per_run: at most this many tests in one sandbox (1: a sandbox per test, as the official
            code's process per test; None: as many as fit, see :func:`~klear_lab.rewards.harness.run_harness`).
        fixed_total: ``timeout_s`` is a hard cap: no time added for fresh sandboxes or stalls.

    Raises:
        RuntimeError: bwrap is missing or the sandbox failed to start.
    """
    payload = {"code": code, "func": func, "inputs": [list(t["input"]) for t in tests], "test_s": test_timeout_s}
    res = run_harness(_HARNESS, payload, "inputs", timeout_s, limits, tests_per_run, fixed_total)
    return verdicts(res, timeout_s, test_timeout_s, len(tests),
                     lambda i, rec: "out" in rec and _matches(rec["out"], tests[i]["output"]))


def _matches(got: Any, expected: Any) -> bool:
    """A verdict for any value the program returned: one that cannot be compared fails its test (a forged
    line nested deeper than any expected output; an int too large for a float: ``10**400`` vs 2.5)."""
    try:
        return outputs_match(got, expected)
    except (RecursionError, OverflowError, ValueError, TypeError):
        return False
