"""Seeded multi-step arithmetic with chain-of-thought solutions and ``\\boxed{}`` answers.

Difficulty levels (all operands two-digit unless stated):
  1 (easy)   two operations, ``+``/``-``            e.g. ``47+38-29``
  2 (medium) three operations, ``+``/``-``          e.g. ``47+38-29+61``
  3 (hard)   three operations incl. one ``*`` by a one-digit factor, ``*`` evaluated first

The chain of thought writes every operation with its digits in column order, so a small
model with digit-level tokens can learn it: ``47+38: 7+8=15 c1, 4+3+1=8 so 85``.
Teacher errors are injected as one wrong intermediate result that propagates to the answer.
Intermediate results never go negative, so every step is a plain column operation.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

LEVELS = (1, 2, 3)


@dataclass(frozen=True)
class Problem:
    """An expression ``nums[0] ops[0] nums[1] ...``; ``*`` binds tighter than ``+``/``-``."""

    expr: str
    answer: int
    steps: tuple[tuple[int, str, int, int], ...]  # (left, op, right, result) in evaluation order
    nums: tuple[int, ...] = ()
    ops: tuple[str, ...] = ()


def make_problem(rng: random.Random, level: int) -> Problem:
    """Draw one problem of ``level`` whose every intermediate result is in [0, 999]."""
    if level not in LEVELS:
        raise ValueError(f"arithmetic level must be one of {LEVELS}, got {level}")
    while True:
        n_ops = 2 if level == 1 else 3
        nums = [rng.randint(10, 99) for _ in range(n_ops + 1)]
        ops = [rng.choice("+-") for _ in range(n_ops)]
        if level == 3:
            k = rng.randrange(n_ops)
            ops[k], nums[k + 1] = "*", rng.randint(2, 9)
        expr = str(nums[0]) + "".join(f"{o}{n}" for o, n in zip(ops, nums[1:]))
        steps = evaluate(nums, ops)
        if all(0 <= s[3] <= 999 for s in steps):
            return Problem(expr, steps[-1][3], tuple(steps), tuple(nums), tuple(ops))


def evaluate(nums, ops, error_step: int | None = None, delta: int = 0) -> list[tuple[int, str, int, int]]:
    """Steps in evaluation order (products first); ``error_step`` gets ``delta`` added and propagates."""
    steps: list[tuple[int, str, int, int]] = []

    def record(left: int, op: str, right: int, result: int) -> int:
        if len(steps) == error_step:
            result += delta
        steps.append((left, op, right, result))
        return result

    terms, signs = [nums[0]], ["+"]
    for op, n in zip(ops, nums[1:]):
        if op == "*":
            terms[-1] = record(terms[-1], "*", n, terms[-1] * n)
        else:
            terms.append(n)
            signs.append(op)
    acc = terms[0]
    for sign, term in zip(signs[1:], terms[1:]):
        acc = record(acc, sign, term, acc + term if sign == "+" else acc - term)
    return steps


def column_trace(left: int, op: str, right: int, result: int) -> str:
    """One operation written digit by digit, least significant first (carries/borrows shown)."""
    if op == "*":
        return f"{left}*{right}={result}"
    a, b = str(left)[::-1], str(right)[::-1]
    parts, carry = [], 0
    for i in range(max(len(a), len(b))):
        x = int(a[i]) if i < len(a) else 0
        y = int(b[i]) if i < len(b) else 0
        if op == "+":
            total = x + y + carry
            parts.append(f"{x}+{y}" + (f"+{carry}" if carry else "") + f"={total}")
            carry = total // 10
        else:
            total = x - y - carry
            borrow = 1 if total < 0 else 0
            parts.append(f"{x}-{y}" + (f"-{carry}" if carry else "") + f"={total + 10 * borrow}"
                         + (" b1" if borrow else ""))
            carry = borrow
    return f"{left}{op}{right}: " + ", ".join(parts) + f" so {result}"


def padded_trace(left: int, op: str, right: int, result: int, width: int = 3) -> str:
    """Fixed-width column trace: every number zero-padded, every column ``x op y op c=cd``.

    Because every piece has a fixed length, each digit the model must read sits at a fixed
    offset from where it is written, which tiny models learn far faster than variable layouts.
    ``c`` is the carry (or borrow) in, the two result digits are carry/borrow out and the digit.
    """
    if op == "*":
        return f"{left:0{width}d}*{right}={result:0{width}d}"
    a, b = f"{left:0{width}d}"[::-1], f"{right:0{width}d}"[::-1]
    cols, carry = [], 0
    for x, y in zip(map(int, a), map(int, b)):
        total = x + y + carry if op == "+" else x - y - carry
        out = 1 if (total >= 10 if op == "+" else total < 0) else 0
        digit = total - 10 if op == "+" and out else total + 10 * out if op == "-" else total
        cols.append(f"{x}{op}{y}{op}{carry}={out}{digit}")
        carry = out
    return f"{left:0{width}d}{op}{right:0{width}d}:" + ",".join(cols) + f">{result:0{width}d}"


def solve(problem: Problem, *, style: str = "full", error_step: int | None = None,
          rng: random.Random | None = None) -> tuple[str, int]:
    """Render a teacher response and the final answer it states.

    Args:
        style: ``padded`` (fixed-width column traces), ``full`` (column traces), ``steps`` (one
            ``a+b=c`` line per step), ``terse`` (answer only inside think), ``noisy`` (full traces
            with filler lines).
        error_step: index of a step whose result is perturbed (the error propagates).
    """
    rng = rng or random.Random(0)
    delta = rng.choice([-10, -2, -1, 1, 2, 10]) if error_step is not None else 0
    steps = evaluate(problem.nums, problem.ops, error_step, delta)
    lines = []
    for left, op, right, result in steps:
        if style == "padded" and min(left, right, result) >= 0 and max(left, right, result) <= 999:
            lines.append(padded_trace(left, op, right, result))
        elif style in ("full", "noisy") and min(left, right, result) >= 0:
            lines.append(column_trace(left, op, right, result))
        else:
            lines.append(f"{left}{op}{right}={result}")
        if style == "noisy" and rng.random() < 0.5:
            lines.append(rng.choice(["hmm", "wait, check", "ok", "so far so good"]))
    value = steps[-1][3]
    think = str(value) if style == "terse" else "\n".join(lines)
    return f"<think>{think}</think>\\boxed{{{value}}}", value


def prompt_text(problem: Problem) -> str:
    return f"Compute {problem.expr}."
