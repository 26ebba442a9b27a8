"""Cost of the code reward's sandbox per candidate: all tests in one sandbox against ``process_per_test``.

    .venv/bin/python scripts/bench_code_reward.py
    .venv/bin/python scripts/bench_code_reward.py --tests 16 --candidates 8 --workers 2

Scores ``--candidates`` correct solutions of ``--tests`` tests each, as function tests and as
stdin/stdout programs, with the shipped ``code`` reward once with the tests sharing a sandbox (the
default) and once with a sandbox per test, and prints seconds per candidate and the ratio between the
two, measured in this process one after the other. Needs bwrap (``scripts/bootstrap.sh`` installs it).
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from bench_args import positive

if TYPE_CHECKING:  # imported where used: a bad argument is refused before the heavy imports
    from klear_lab.data.records import Record
    from klear_lab.rewards.code_exec import CodeExecReward

FUNCTION = "```python\ndef f(a, b):\n    return a + b\n```"
PROGRAM = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"


def records(n_candidates: int, n_tests: int, stdio: bool) -> list[Record]:
    """``n_candidates`` records of ``n_tests`` sums, as function or program tests."""
    from klear_lab.data.records import Record

    def test(k: int) -> dict:
        if stdio:
            return {"stdin": f"{k} {k + 1}\n", "stdout": f"{2 * k + 1}\n"}
        return {"input": [k, k + 1], "output": 2 * k + 1}
    tests = tuple(test(k) for k in range(n_tests))
    return [Record(uid=f"sum-{c}", source="bench", task="code", prompt="add", answer="", tests=tests)
            for c in range(n_candidates)]


def seconds_per_candidate(reward: CodeExecReward, answer: str, batch: list[Record]) -> float:
    """Wall seconds per candidate for one batch, after checking every candidate passed."""
    texts = [f"<think>sum</think>{answer}"] * len(batch)
    start = time.perf_counter()
    outs = reward(texts, batch)
    took = time.perf_counter() - start
    failed = [o.info for o in outs if not o.acc]
    if failed:
        raise SystemExit(f"a correct solution failed: {failed[0]}")
    return took / len(batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", type=positive, default=16, help="tests per candidate (the paper's cap is 16)")
    parser.add_argument("--candidates", type=positive, default=8)
    parser.add_argument("--workers", type=positive, default=2, help="the reward's parallel sandboxes")
    args = parser.parse_args()
    from klear_lab.rewards.code_exec import CodeExecReward

    print(f"{args.candidates} candidates x {args.tests} tests, {args.workers} sandboxes at a time")
    for kind, answer in (("function", FUNCTION), ("stdio", PROGRAM)):
        batch = records(args.candidates, args.tests, kind == "stdio")
        shared = seconds_per_candidate(CodeExecReward(workers=args.workers), answer, batch)
        alone = seconds_per_candidate(CodeExecReward(workers=args.workers, process_per_test=True), answer, batch)
        print(f"{kind:>8} tests: shared sandbox {shared * 1e3:7.0f} ms/candidate | sandbox per test "
              f"{alone * 1e3:7.0f} ms/candidate ({alone / args.tests * 1e3:.0f} ms/test) | {alone / shared:.1f}x")


if __name__ == "__main__":
    main()
