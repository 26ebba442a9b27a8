"""``math_verify`` reward: boxed math answers judged by math-verify (paper §3.1)."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any, ClassVar

from klear_lab.data.records import Record
from klear_lab.registry import REWARD
from klear_lab.rewards.base import RewardOutput, answer_part, check_batch, think_tag_penalty
from klear_lab.rewards.math_check import equivalent, equivalent_item, exact_match, warm_up
from klear_lab.rewards.pool import PoolResult, ScoringPool


@REWARD.register("math_verify")
@dataclass(frozen=True)
class MathVerifyReward:
    r"""Rule-based math reward of Klear-Reasoner (arXiv 2508.07629, §3.1; official ``math_dapo``).

    Checks in order: no ``</think>`` → ``missing_think_close``; no ``<think>`` → ``missing_think_open``;
    the text after the last ``</think>`` matches the ground truth (``Record.answer``) → ``correct``;
    otherwise, unparseable or timed out → ``wrong``. The default values are the official code's
    (``reward_config.ScoringConfig``); the paper only says a missing tag is penalized. ``acc`` is
    ``score == correct``.

    Equivalence: exact match of the last ``\\boxed{}`` content, else math-verify
    ``verify(parse("\\boxed{gt}"), parse(answer))``, each of the three math-verify steps under
    ``timeout_s``. Batches of at least ``inline_below`` items, or calls off the main thread, run in a
    pool of ``workers`` processes, with the same alarms and a hard kill (``item_limit_s``) for what an
    alarm cannot stop; smaller batches run inline. Call ``close()`` (or use ``with``) to stop the pool.
    """

    correct: float = 1.0
    """Score of a correct answer (+1, paper.md §3.1); the other scores must differ from it."""
    wrong: float = -1.0
    """Score of a wrong, unparseable or timed-out answer (the official code's −1, paper.md §3.1)."""
    missing_think_close: float = -0.5
    """Score of a response without ``</think>`` (e.g. truncated), checked first (the official code's −0.5,
    paper.md §3.1)."""
    missing_think_open: float = -2.0
    """Score of a response with ``</think>`` but no ``<think>`` (the official code's −2.0, paper.md §3.1)."""
    timeout_s: float = 5.0
    """math-verify's own alarm in seconds (rounded up to whole seconds) for each of parsing the answer,
    parsing the ground truth and verifying (the official code's 5 s, paper.md §3.1)."""
    workers: int = 2
    """Worker processes of the scoring pool (started at the first batch that does not run inline)."""
    inline_below: int = 16
    """Batches of fewer items, called from the main thread, are scored inline, without the pool; 0 = always
    use the pool."""

    tasks: ClassVar[tuple[str, ...]] = ("math",)  # the Record.task values it can score

    def __post_init__(self) -> None:
        for name in ("wrong", "missing_think_close", "missing_think_open"):
            if getattr(self, name) == self.correct:
                value = getattr(self, name)
                raise ValueError(f"{name} must differ from correct ({self.correct}), got {value}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.inline_below < 0:
            raise ValueError(f"inline_below must be >= 0, got {self.inline_below}")

    def __call__(self, completions: list[str], records: list[Record]) -> list[RewardOutput]:
        """Score each completion against its record's ground truth (``record.answer``)."""
        check_batch(completions, records)
        outs: list[RewardOutput | None] = [None] * len(completions)
        todo: list[int] = []
        for i, (text, record) in enumerate(zip(completions, records, strict=True)):
            outs[i] = think_tag_penalty(text, self.missing_think_close, self.missing_think_open)
            if outs[i] is None and exact_match(answer_part(text), record.answer):
                outs[i] = RewardOutput(self.correct, True, True, "exact")
            elif outs[i] is None:
                todo.append(i)
        items = [(answer_part(completions[i]), records[i].answer, self.timeout_s) for i in todo]
        for i, res in zip(todo, self._judge(items), strict=True):
            outs[i] = self._verdict(res)
        return outs  # type: ignore[return-value]

    def close(self) -> None:
        """Stop the scoring pool, if one was started."""
        pool = self.__dict__.get("_pool")
        if pool is not None:
            pool.close()
            object.__setattr__(self, "_pool", None)

    def __enter__(self) -> MathVerifyReward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def item_limit_s(self) -> float:
        """The pool's hard limit per item: past the three alarms' whole seconds, so that an item scores
        the same in the pool as inline (a hard ``timeout_s`` cut a slow parse plus a slow verify that
        inline scoring let finish); it stops what an alarm cannot (a hang in C code)."""
        return 3 * math.ceil(self.timeout_s) + 1.0

    def _judge(self, items: list[tuple[str, str, float]]) -> list[PoolResult]:
        inline = len(items) < self.inline_below and threading.current_thread() is threading.main_thread()
        if inline:
            return [PoolResult("ok", equivalent(*item)) for item in items]
        return self._get_pool().map(items)

    def _get_pool(self) -> ScoringPool:
        pool: Any = self.__dict__.get("_pool")
        if pool is None:
            pool = ScoringPool(equivalent_item, initializer=warm_up, workers=self.workers,
                               timeout_s=self.item_limit_s)
            object.__setattr__(self, "_pool", pool)  # runtime state, not a hyperparameter
        return pool

    def _verdict(self, res: PoolResult) -> RewardOutput:
        if res.status == "ok" and res.value:
            return RewardOutput(self.correct, True, True, "verified")
        info = "wrong" if res.status == "ok" else f"{res.status}: {res.error}"
        return RewardOutput(self.wrong, False, True, info[:200])
