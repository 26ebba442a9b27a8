"""Seeded program synthesis: write ``f`` from input/output examples, graded by hidden tests.

Difficulty levels (one family drawn uniformly within a level, constants drawn per task):
  1 (easy)   one-step rules: ``a * x + b``, string reverse, string upper-case
  2 (medium) list reductions and modular patterns: ``sum(xs)``, ``max(xs)``, ``xs.count(v)``, ``x % k``
  3 (hard)   compositions and two arguments: sum of squares of evens, ``x * y + c``, filter-then-map

Every family carries its reference solution twice: as source text (what the teacher writes, and
``Record.answer``) and as a Python callable of ours, used to compute test outputs and to grade
the subtly wrong variants ("bugs") a noisy teacher writes. A task can also carry flawed hidden
tests, written from one of its bugs (``with_flawed_tests``), and a strong solver's estimated pass
rate on them (``solver_pass_rate``), for the paper's test-case filter. Model code is never
executed here.
"""

from __future__ import annotations

import copy
import random
import string
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

LEVELS = (1, 2, 3)
N_SHOWN = 3  # examples shown in the prompt; the hidden tests are drawn apart from them


@dataclass(frozen=True)
class Variant:
    """One implementation of ``f``: its body expression and the equivalent callable."""

    expr: str
    fn: Callable[..., Any]


@dataclass(frozen=True)
class Family:
    """A task family instance: signature, rule, reference, bugs and an input sampler."""

    name: str
    level: int
    params: str  # signature of f, e.g. "x" or "x, y"
    rule: str  # one-line description used in the teacher's reasoning
    ref: Variant
    bugs: tuple[Variant, ...]
    draw: Callable[[random.Random], list[Any]]  # -> positional arguments of one call


@dataclass(frozen=True)
class Task:
    """A drawn task: its family, the shown examples and the hidden tests (``{input, output}``)."""

    family: Family
    examples: tuple[dict[str, Any], ...]
    tests: tuple[dict[str, Any], ...]


def _ints(lo: int, hi: int) -> Callable[[random.Random], list[Any]]:
    return lambda rng: [rng.randint(lo, hi)]


def _pair(lo: int, hi: int) -> Callable[[random.Random], list[Any]]:
    return lambda rng: [rng.randint(lo, hi), rng.randint(lo, hi)]


def _lists(lo: int, hi: int, max_len: int) -> Callable[[random.Random], list[Any]]:
    return lambda rng: [[rng.randint(lo, hi) for _ in range(rng.randint(1, max_len))]]


def _words(rng: random.Random) -> list[Any]:
    return ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 7)))]


def _linear(rng: random.Random) -> Family:
    a, b = rng.randint(2, 9), rng.randint(1, 9)
    ref = Variant(f"{a} * x + {b}", lambda x: a * x + b)
    bugs = (Variant(f"{a} * x - {b}", lambda x: a * x - b),
            Variant(f"{a} * (x + {b})", lambda x: a * (x + b)))
    return Family("linear", 1, "x", f"multiply x by {a}, then add {b}", ref, bugs, _ints(-20, 20))


def _reverse(rng: random.Random) -> Family:
    ref = Variant("s[::-1]", lambda s: s[::-1])
    bugs = (Variant("s[:0:-1]", lambda s: s[:0:-1]),
            Variant("s[-2::-1]", lambda s: s[-2::-1]))
    return Family("reverse", 1, "s", "reverse the string", ref, bugs, _words)


def _upper(rng: random.Random) -> Family:
    ref = Variant("s.upper()", lambda s: s.upper())
    bugs = (Variant("s.capitalize()", lambda s: s.capitalize()),
            Variant("s[:-1].upper() + s[-1]", lambda s: s[:-1].upper() + s[-1]))
    return Family("upper", 1, "s", "upper-case every letter", ref, bugs, _words)


def _list_sum(rng: random.Random) -> Family:
    ref = Variant("sum(xs)", sum)
    bugs = (Variant("sum(xs[:-1])", lambda xs: sum(xs[:-1])),
            Variant("sum(abs(x) for x in xs)", lambda xs: sum(abs(x) for x in xs)))
    return Family("list_sum", 2, "xs", "add up the list", ref, bugs, _lists(-9, 20, 8))


def _list_max(rng: random.Random) -> Family:
    ref = Variant("max(xs)", max)
    bugs = (Variant("max(xs[1:] or xs)", lambda xs: max(xs[1:] or xs)),
            Variant("max(abs(x) for x in xs)", lambda xs: max(abs(x) for x in xs)))
    return Family("list_max", 2, "xs", "take the largest element", ref, bugs, _lists(-20, 20, 8))


def _count(rng: random.Random) -> Family:
    v = rng.randint(0, 5)
    ref = Variant(f"xs.count({v})", lambda xs: xs.count(v))
    bugs = (Variant(f"xs[1:].count({v})", lambda xs: xs[1:].count(v)),
            Variant(f"len([x for x in xs if x >= {v}])", lambda xs: len([x for x in xs if x >= v])))
    return Family("count", 2, "xs", f"count how often {v} occurs", ref, bugs, _lists(0, 5, 10))


def _mod(rng: random.Random) -> Family:
    k = rng.randint(2, 9)
    ref = Variant(f"x % {k}", lambda x: x % k)
    bugs = (Variant(f"(x + 1) % {k}", lambda x: (x + 1) % k),
            Variant(f"x % {k + 1}", lambda x: x % (k + 1)))
    return Family("mod", 2, "x", f"take the remainder of x divided by {k}", ref, bugs, _ints(0, 60))


def _sum_sq_even(rng: random.Random) -> Family:
    ref = Variant("sum(x * x for x in xs if x % 2 == 0)", lambda xs: sum(x * x for x in xs if x % 2 == 0))
    bugs = (Variant("sum(x * x for x in xs if x % 2 == 1)", lambda xs: sum(x * x for x in xs if x % 2 == 1)),
            Variant("sum(x * x for x in xs if x > 0 and x % 2 == 0)",
                    lambda xs: sum(x * x for x in xs if x > 0 and x % 2 == 0)),
            Variant("sum(x for x in xs if x % 2 == 0) ** 2",
                    lambda xs: sum(x for x in xs if x % 2 == 0) ** 2))
    return Family("sum_sq_even", 3, "xs", "square the even elements and add them up", ref, bugs,
                  _lists(-9, 9, 8))


def _mul_add(rng: random.Random) -> Family:
    c = rng.randint(1, 9)
    ref = Variant(f"x * y + {c}", lambda x, y: x * y + c)
    bugs = (Variant(f"x * y - {c}", lambda x, y: x * y - c),
            Variant(f"x * (y + {c})", lambda x, y: x * (y + c)))
    return Family("mul_add", 3, "x, y", f"multiply x by y, then add {c}", ref, bugs, _pair(-9, 9))


def _scale_pos(rng: random.Random) -> Family:
    k = rng.randint(2, 5)
    ref = Variant(f"[x * {k} for x in xs if x > 0]", lambda xs: [x * k for x in xs if x > 0])
    bugs = (Variant(f"[x * {k} for x in xs if x >= 0]", lambda xs: [x * k for x in xs if x >= 0]),
            Variant(f"[x + {k} for x in xs if x > 0]", lambda xs: [x + k for x in xs if x > 0]))
    return Family("scale_pos", 3, "xs", f"keep the positive elements, each multiplied by {k}", ref, bugs,
                  _lists(-9, 9, 8))


FAMILIES: dict[int, tuple[Callable[[random.Random], Family], ...]] = {
    1: (_linear, _reverse, _upper),
    2: (_list_sum, _list_max, _count, _mod),
    3: (_sum_sq_even, _mul_add, _scale_pos),
}


def make_task(rng: random.Random, level: int, n_tests: int = 12) -> Task:
    """Draw a family of ``level``, ``N_SHOWN`` examples and ``n_tests`` hidden tests (distinct inputs)."""
    if level not in LEVELS:
        raise ValueError(f"program level must be one of {LEVELS}, got {level}")
    family = rng.choice(FAMILIES[level])(rng)
    cases: dict[str, dict[str, Any]] = {}
    for _ in range(50 * (N_SHOWN + n_tests)):  # small input domains may hold fewer distinct inputs
        args = family.draw(rng)
        cases.setdefault(repr(args), {"input": args, "output": family.ref.fn(*copy.deepcopy(args))})
        if len(cases) == N_SHOWN + n_tests:
            break
    drawn = list(cases.values())
    return Task(family, tuple(drawn[:N_SHOWN]), tuple(drawn[N_SHOWN:]))


def with_flawed_tests(task: Task, rng: random.Random) -> Task:
    """``task`` with hidden tests whose outputs come from one of its failing bugs.

    Models the flawed test cases of scraped code data (paper §3.2.1): the shown examples still
    follow the rule, but the grader expects a wrong solution's outputs, so the reference fails
    some tests and that bug passes them all. Unchanged if every failing bug raises on a test.
    """
    usable = []  # each failing bug's outputs on the hidden tests, kept when none is an exception
    for bug in failing_bugs(task):
        outputs = [_output(bug.fn, case["input"]) for case in task.tests]
        if not any(isinstance(out, Exception) for out in outputs):
            usable.append(outputs)
    if not usable:
        return task
    outputs = rng.choice(usable)
    tests = tuple({"input": case["input"], "output": out} for case, out in zip(task.tests, outputs, strict=True))
    return Task(task.family, task.examples, tests)


def solver_pass_rate(task: Task, rng: random.Random, samples: int = 16, error: float = 0.02) -> float:
    """Share of ``samples`` strong-solver answers that pass every hidden test.

    The solver writes the reference, or with probability ``error`` one of the family's bugs:
    the embedded stand-in for the paper's pass@16 of DeepSeek-R1 samples (§3.2.1), which is
    near 1 on sound tasks and near 0 on tasks with flawed tests.
    """
    bugs = task.family.bugs
    drawn = Counter(rng.choice(bugs) if rng.random() < error and bugs else task.family.ref for _ in range(samples))
    hits = sum(n for variant, n in drawn.items() if pass_rate(variant.fn, task.tests) == 1.0)
    return hits / samples


def source(family: Family, variant: Variant) -> str:
    """Python source of ``f`` implemented by ``variant``."""
    return f"def f({family.params}):\n    return {variant.expr}\n"


def call_text(args: list[Any]) -> str:
    return "f(" + ", ".join(repr(a) for a in args) + ")"


def prompt_text(task: Task) -> str:
    shown = "\n".join(f"{call_text(e['input'])} == {e['output']!r}" for e in task.examples)
    return (f"Write a Python function `f({task.family.params})` that matches these examples:\n{shown}\n"
            "Answer with a ```python block defining f.")


def pass_rate(fn: Callable[..., Any], tests: tuple[dict[str, Any], ...]) -> float:
    """Share of ``tests`` that ``fn`` (one of the generator's own callables) passes; an exception fails."""
    passed = sum(_output(fn, case["input"]) == case["output"] for case in tests)
    return passed / max(len(tests), 1)


def failing_bugs(task: Task) -> list[Variant]:
    """The family's bugs that fail at least one hidden test (the only ones a wrong teacher may write)."""
    return [bug for bug in task.family.bugs if pass_rate(bug.fn, task.tests) < 1.0]


def _output(fn: Callable[..., Any], args: list[Any]) -> Any:
    """``fn(*args)`` on a copy of ``args``; an exception (a buggy variant) yields a sentinel."""
    try:
        return fn(*copy.deepcopy(args))
    except Exception as exc:  # noqa: BLE001 - a buggy variant may raise on some inputs
        return exc


def solve(task: Task, *, style: str = "full", wrong: bool = False,
          rng: random.Random | None = None) -> tuple[str, bool]:
    """Render a teacher response and whether it passes every hidden test.

    Args:
        style: ``full`` (rule + a check of each shown example), ``terse`` (rule only) or
            ``noisy`` (full with filler lines).
        wrong: write one of the failing bugs instead of the reference (if the drawn tests
            happen to catch no bug, the response stays correct).
    """
    rng = rng or random.Random(0)
    bugs = failing_bugs(task) if wrong else []
    variant = rng.choice(bugs) if bugs else task.family.ref
    lines = [f"The rule is: {task.family.rule}."]
    if style in ("full", "noisy"):
        for case in task.examples:
            lines.append(f"check {call_text(case['input'])} -> {_output(variant.fn, case['input'])!r}")
            if style == "noisy" and rng.random() < 0.5:
                lines.append(rng.choice(["hmm", "wait, let me see", "ok", "looks fine"]))
    think = "\n".join(lines)
    return f"<think>{think}</think>\n```python\n{source(task.family, variant)}```", variant is task.family.ref
