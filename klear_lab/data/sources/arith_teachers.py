"""Named arithmetic sources ("teachers") of decreasing quality for the top-K source ablation.

Mirrors the paper's Tables 4-5 setting: sources ranked by quality, where lower-ranked ones have
more wrong answers and less useful reasoning. Ranks are fixed here so ``top_k`` is meaningful.
"""

from __future__ import annotations

from dataclasses import dataclass

from klear_lab.data.sources.arith import ArithSource
from klear_lab.registry import SOURCE


@SOURCE.register("arith_r1")
@dataclass(frozen=True)
class ArithR1(ArithSource):
    """Careful teacher: 2 % wrong answers, fixed-width column traces. Quality rank 1."""

    teacher_error: float = 0.02
    style: str = "padded"
    quality_rank: int = 1


@SOURCE.register("arith_qwq")
@dataclass(frozen=True)
class ArithQwQ(ArithSource):
    """Good teacher: 8 % wrong answers, fixed-width column traces. Quality rank 2."""

    teacher_error: float = 0.08
    style: str = "padded"
    quality_rank: int = 2


@SOURCE.register("arith_distill")
@dataclass(frozen=True)
class ArithDistill(ArithSource):
    """Shortcut teacher: 15 % wrong, one ``a+b=c`` line per step (no column work). Rank 3."""

    teacher_error: float = 0.15
    style: str = "steps"
    quality_rank: int = 3


@SOURCE.register("arith_web")
@dataclass(frozen=True)
class ArithWeb(ArithSource):
    """Web-mined: 25 % wrong, column traces with filler lines. Rank 4."""

    teacher_error: float = 0.25
    style: str = "noisy"
    quality_rank: int = 4


@SOURCE.register("arith_forum")
@dataclass(frozen=True)
class ArithForum(ArithSource):
    """Forum answers: 35 % wrong, no reasoning (answer only). Rank 5."""

    teacher_error: float = 0.35
    style: str = "terse"
    quality_rank: int = 5


@SOURCE.register("arith_scrape")
@dataclass(frozen=True)
class ArithScrape(ArithSource):
    """Scraped: 50 % wrong, noisy traces. Rank 6."""

    teacher_error: float = 0.5
    style: str = "noisy"
    quality_rank: int = 6
