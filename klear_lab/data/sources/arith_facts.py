"""A drill of single-column facts in the fixed-width trace notation, mixed into SFT as a curriculum.

Tiny models learn the copying in ``padded`` traces within a few hundred steps but learn the digit
facts themselves last (per-token losses stay at ~1 nat on the computed digits). Short records
``Column 9+6+1.`` -> ``<think>9+6+1=16</think>\\boxed{16}`` put many fact examples in few tokens,
in exactly the local pattern the traces use (``x+y+c=od``: carry out, digit; ``x-y-b=bd``: borrow
out, digit). These are training-only records: the eval split is empty.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import ClassVar

from klear_lab.data.records import Record
from klear_lab.data.sources.base import check_quality_rank
from klear_lab.registry import SOURCE


def column_fact(x: int, op: str, y: int, carry: int) -> str:
    """``od`` for ``x op y op carry``: carry/borrow out and the digit."""
    total = x + y + carry if op == "+" else x - y - carry
    out = int(total >= 10) if op == "+" else int(total < 0)
    return f"{out}{total - 10 * out if op == '+' else total + 10 * out}"


@SOURCE.register("arith_facts")
@dataclass(frozen=True)
class ArithFacts:
    """Column-fact drill (x, y in 0..9, carry in 0..1, + and -): 400 distinct facts, sampled."""

    task: ClassVar[str] = "math"
    """The task of every record (``Record.task``): read by the up-front ``rl.reward`` check without generating."""
    n_records: int = 3000
    """Train records, each a fact drawn uniformly with replacement (seeded by the world seed), so every fact
    appears about ``n_records / 400`` times; the eval split is always empty."""
    quality_rank: int = 1
    """Rank for the ``top_k`` data mix, 1 = best (as the paper ranks its sources, paper.md §4.2 Tables 4-5)."""

    def __post_init__(self) -> None:
        check_quality_rank(self)
        if self.n_records < 0:
            raise ValueError(f"n_records must be >= 0, got {self.n_records}")

    def records(self, seed: int, split: str) -> list[Record]:
        if split == "eval":
            return []
        rng = random.Random(f"arith_facts/{seed}")
        out = []
        for i in range(self.n_records):
            x, y, c, op = rng.randint(0, 9), rng.randint(0, 9), rng.randint(0, 1), rng.choice("+-")
            fact = column_fact(x, op, y, c)
            out.append(Record(uid=f"arith_facts/{i}", source="arith_facts", task=self.task,
                              prompt=f"Column {x}{op}{y}{op}{c}.", answer=fact, difficulty=1,
                              response=f"<think>{x}{op}{y}{op}{c}={fact}</think>\\boxed{{{fact}}}",
                              response_correct=True))
        return out
