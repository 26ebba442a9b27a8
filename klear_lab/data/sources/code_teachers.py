"""Named code sources ("teachers") of decreasing quality for the top-K source ablation.

Mirrors the paper's Table 5 setting (code sources ranked by quality, 31,600 examples per
setting): lower-ranked teachers write more subtly wrong functions and less useful reasoning.
"""

from __future__ import annotations

from dataclasses import dataclass

from klear_lab.data.sources.code import CodeSource
from klear_lab.registry import SOURCE


@SOURCE.register("code_r1")
@dataclass(frozen=True)
class CodeR1(CodeSource):
    """Careful teacher: 2 % wrong functions, rule plus example checks. Quality rank 1."""

    teacher_error: float = 0.02
    style: str = "full"
    quality_rank: int = 1


@SOURCE.register("code_qwq")
@dataclass(frozen=True)
class CodeQwQ(CodeSource):
    """Good teacher: 8 % wrong functions, rule plus example checks. Quality rank 2."""

    teacher_error: float = 0.08
    style: str = "full"
    quality_rank: int = 2


@SOURCE.register("code_distill")
@dataclass(frozen=True)
class CodeDistill(CodeSource):
    """Shortcut teacher: 20 % wrong, states the rule without checking examples. Rank 3."""

    teacher_error: float = 0.2
    style: str = "terse"
    quality_rank: int = 3


@SOURCE.register("code_scrape")
@dataclass(frozen=True)
class CodeScrape(CodeSource):
    """Scraped: 40 % wrong, checks mixed with filler lines. Rank 4."""

    teacher_error: float = 0.4
    style: str = "noisy"
    quality_rank: int = 4


@SOURCE.register("code_web")
@dataclass(frozen=True)
class CodeWeb(CodeSource):
    """Web answers: 50 % wrong, checks mixed with filler lines. Rank 5."""

    teacher_error: float = 0.5
    style: str = "noisy"
    quality_rank: int = 5


@SOURCE.register("code_forum")
@dataclass(frozen=True)
class CodeForum(CodeSource):
    """Forum answers: 60 % wrong, the rule without checks. Rank 6."""

    teacher_error: float = 0.6
    style: str = "terse"
    quality_rank: int = 6
