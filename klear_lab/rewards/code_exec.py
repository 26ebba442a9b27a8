"""``code`` reward: a python function graded by hidden tests in a bubblewrap sandbox (paper §3.2)."""

from __future__ import annotations

import json
import keyword
import random
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

from klear_lab.data.records import Record, own_test_limits
from klear_lab.errors import DataError
from klear_lab.registry import REWARD
from klear_lab.rewards.base import RewardOutput, answer_part, check_batch, think_tag_penalty
from klear_lab.rewards.function_tests import TestRun, run_function_tests
from klear_lab.rewards.harness import total_limit_s
from klear_lab.rewards.sandbox import require_bwrap
from klear_lab.rewards.sandbox_check import sandbox_unavailable
from klear_lab.rewards.stdio_tests import run_stdio_tests

MODES = ("soft", "hard", "affine")
HARD_PASS, HARD_FAIL = 1.0, -1.0
_CODE_BLOCK = re.compile(r"```(?:python|py)[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)


def extract_code(answer: str) -> str | None:
    """Return the last fenced ``python`` (or ``py``) block of ``answer``; None if there is none."""
    blocks = _CODE_BLOCK.findall(answer)
    return blocks[-1] if blocks else None


def check_tests(uid: str, tests: list[Any]) -> None:
    """Raise ``DataError`` naming the record for tests the harness cannot run: all function tests
    (``{"input": [args], "output": value}``, JSON values) or all program tests (``{"stdin": str,
    "stdout": str}``). They raised KeyError or TypeError in the middle of a reward batch."""
    def bad(i: int, why: str) -> DataError:
        return DataError(f"code record {uid!r}, test {i}: {why}")

    stdio = isinstance(tests[0], dict) and "stdin" in tests[0]
    for i, t in enumerate(tests):
        if not isinstance(t, dict):
            raise bad(i, f"expected a mapping, got {type(t).__name__}")
        if stdio != ("stdin" in t):
            raise bad(i, "mixes program tests (stdin/stdout) with function tests (input/output)")
        if stdio and not (isinstance(t["stdin"], str) and isinstance(t.get("stdout"), str)):
            raise bad(i, "a program test needs string 'stdin' and 'stdout'")
        if not stdio and not (isinstance(t.get("input"), (list, tuple)) and "output" in t):
            raise bad(i, "a function test needs 'input' (a list of arguments) and 'output'")
    try:
        json.dumps(tests)
    except (TypeError, ValueError) as exc:
        raise DataError(f"code record {uid!r}: tests are not JSON values ({exc})") from None


@REWARD.register("code")
@dataclass(frozen=True)
class CodeExecReward:
    """Test-based code reward of Klear-Reasoner (arXiv 2508.07629, §3.2; official ``code_r1_compute``).

    Checks in order: no ``</think>`` → ``missing_think_close``; no ``<think>`` → ``missing_think_open``;
    no fenced ``python`` block after the last ``</think>`` → ``no_code``. Otherwise the block runs on at
    most ``max_tests`` of ``Record.tests`` in a bubblewrap sandbox: a function test ``{"input": [args],
    "output": value}`` calls ``func_name``; a program test ``{"stdin": str, "stdout": str}``, as verl code
    data holds, runs the block as a whole program. Each test (and defining the solution) gets
    ``timeout_s``: a slow test fails and the next one runs; the whole run gets ``total_timeout_s``. The
    score is ``mode``'s function of the pass rate p of the drawn tests; ``acc`` is True iff every drawn
    test passed (then the score is 1 in all modes). Up to ``workers`` completions run in parallel, each in
    its own sandbox.
    """

    mode: str = "soft"
    """Score from the pass rate p: ``soft`` (p ∈ [0, 1], the paper's soft reward: "4/16 passed → 0.25"),
    ``hard`` (+1 if p == 1, else −1: the Fig. 3 baseline) or ``affine`` (2p − 1 ∈ [−1, 1], the official
    code's mean of ±1 per test); paper.md §3.2."""
    no_code: float = -1.0
    """Score of a response with both think tags but no fenced ``python`` (or ``py``) block after the last
    ``</think>`` (the official code's −1, paper.md §3.2)."""
    missing_think_close: float = -0.5
    """Score of a response without ``</think>`` (e.g. truncated), checked first (the official code's −0.5,
    paper.md §3.1)."""
    missing_think_open: float = -2.0
    """Score of a response with ``</think>`` but no ``<think>`` (the official code's −2.0, paper.md §3.1)."""
    max_tests: int | None = 16
    """Most tests run per completion: a record with more runs a seeded random subset of this many (the
    official code's 16, paper.md §3.2); None runs all, as LiveCodeBench evaluation."""
    timeout_s: float = 35.0
    """Seconds each test, and defining the solution, may take; a slow test fails and the next one runs (the
    official code's 35 s per test, paper.md §3.2)."""
    total_timeout_s: float | None = None
    """Hard cap in seconds on one completion's whole run; None: every test's limit, one more for defining
    the solution (:func:`~klear_lab.rewards.harness.total_limit_s`), plus time for fresh sandboxes and stalls."""
    workers: int = 4
    """Completions scored at a time (threads, each running its own sandbox)."""
    seed: int = 0
    """Seed of the test subset when a record has more than ``max_tests``: each completion draws its own
    (paper.md §3.2: sampled at random per evaluation), ``random.Random(f"{seed}/{uid}/{code}")``, so a run
    is reproducible and the same code is judged on the same tests. One subset per record, as before, left
    a problem's other tests out of training altogether."""
    func_name: str = "f"
    """The function a function test calls (a Python identifier; the embedded code world's is ``f``); program
    tests (stdin/stdout) do not use it."""
    record_limits: bool = False
    """Let a record's own per-test timeout and test cap (a verl spec's ``timeout``/``max_test_cases``, in
    ``Record.meta`` as ``test_timeout_s``/``max_tests``) replace ``timeout_s``/``max_tests`` for it, as the
    official code reads them per problem (``experiments/paper/rl/code.yaml`` sets it for training); off by
    default, so that ``max_tests: null`` judges on every test, as LiveCodeBench."""
    process_per_test: bool = False
    """Run each test in a sandbox of its own, as the official training reward runs each test as its own
    process (LiveCodeBench's evaluation runs a problem's tests in one): a program that goes looking for the
    harness' internals can then not report results for tests it did not run (the one gap of the shared
    sandbox, README "Code rewards"), and nothing one test leaves behind reaches the next. It costs a sandbox
    start per test (``scripts/bench_code_reward.py``)."""

    tasks: ClassVar[tuple[str, ...]] = ("code",)  # the Record.task values it can score

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.max_tests is not None and self.max_tests < 1:
            raise ValueError(f"max_tests must be >= 1 or None (all tests), got {self.max_tests}")
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.total_timeout_s is not None and not self.total_timeout_s > 0:
            raise ValueError(f"total_timeout_s must be > 0 or None, got {self.total_timeout_s}")
        if not self.func_name.isidentifier() or keyword.iskeyword(self.func_name):  # `def class(...)`: a syntax
            raise ValueError(f"func_name must be a Python identifier, not a keyword, got {self.func_name!r}")

    def unavailable(self) -> str | None:
        """Why this reward cannot run on this machine (no ``bwrap``, or host root without CAP_SYS_ADMIN: it runs
        model-written code in the sandbox, with no unisolated fallback), or None. A run that would call it
        refuses to start (``reward_checks.unavailable_rewards``) instead of failing at its first score."""
        return sandbox_unavailable()

    def __call__(self, completions: list[str], records: list[Record]) -> list[RewardOutput]:
        """Score each completion against its record's hidden tests (``record.tests``)."""
        check_batch(completions, records)
        outs: list[RewardOutput | None] = [None] * len(completions)
        jobs: dict[int, tuple[str, list[dict[str, Any]], float]] = {}
        for i, (text, record) in enumerate(zip(completions, records, strict=True)):
            outs[i] = think_tag_penalty(text, self.missing_think_close, self.missing_think_open)
            code = extract_code(answer_part(text)) if outs[i] is None else None
            if outs[i] is None and code is None:
                outs[i] = RewardOutput(self.no_code, False, False, "no code block")
            elif outs[i] is None:
                jobs[i] = (code, self.draw_tests(record, code), self.limits(record)[1])  # type: ignore[assignment]
        if jobs:
            require_bwrap()  # fail once, before any thread starts
            with ThreadPoolExecutor(min(self.workers, len(jobs)), thread_name_prefix="klear-code") as ex:
                runs = ex.map(lambda job: self._run(*job), jobs.values())
                for i, run in zip(jobs, runs, strict=True):
                    outs[i] = self.score_run(run)
        return outs  # type: ignore[return-value]

    def limits(self, record: Record) -> tuple[int | None, float]:
        """The test cap and per-test timeout that apply to ``record``: its own, where it has them and
        ``record_limits`` is on, else ``max_tests`` and ``timeout_s``."""
        if not self.record_limits:
            return self.max_tests, self.timeout_s
        timeout, cap = own_test_limits(record)
        return (self.max_tests if cap is None else cap), float(self.timeout_s if timeout is None else timeout)

    def draw_tests(self, record: Record, code: str = "") -> list[dict[str, Any]]:
        """At most the record's test cap (``limits``) of its tests: a random subset drawn for ``code`` (see
        ``seed``)."""
        if not record.tests:
            raise DataError(f"code record {record.uid!r} has no tests (Record.tests is empty)")
        tests = list(record.tests)
        check_tests(record.uid, tests)
        cap = self.limits(record)[0]
        if cap is None or len(tests) <= cap:
            return tests
        return random.Random(f"{self.seed}/{record.uid}/{code}").sample(tests, cap)

    def score_run(self, run: TestRun) -> RewardOutput:
        """Map per-test verdicts to the reward of ``mode``."""
        rate = sum(run.passed) / len(run.passed)
        all_pass = rate == 1.0
        if self.mode == "soft":
            score = rate
        elif self.mode == "hard":
            score = HARD_PASS if all_pass else HARD_FAIL
        else:
            score = 2.0 * rate - 1.0
        info = f"{sum(run.passed)}/{len(run.passed)} passed"
        if run.info:
            info += f"; {run.status}: {run.info}"
        return RewardOutput(score, all_pass, True, info[:200])

    def _run(self, code: str, tests: list[dict[str, Any]], test_timeout_s: float) -> TestRun:
        per_run, fixed = (1 if self.process_per_test else None), self.total_timeout_s is not None
        wall = self.total_timeout_s or total_limit_s(test_timeout_s, len(tests), per_run)
        run = run_stdio_tests if "stdin" in tests[0] else partial(run_function_tests, func=self.func_name)
        # stdin/stdout tests (verl, LiveCodeBench) run the block as a whole program, not a function
        return run(code, tests=tests, timeout_s=wall, test_timeout_s=test_timeout_s, tests_per_run=per_run,
                   fixed_total=fixed)
