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

    Checks in order: no ``</think>`` → ``missing_think_close`` (−0.5); no ``<think>`` →
    ``missing_think_open`` (−2.0); the text after the last ``</think>`` matches the ground truth
    (``Record.answer``) → ``correct`` (+1); otherwise, unparseable or timed out → ``wrong`` (−1).
    Values are the official code's (``reward_config.ScoringConfig``); the paper only says a
    missing tag is penalized. ``acc`` is ``score == correct``.

    Equivalence: exact match of the last ``\\boxed{}`` content, else math-verify
    ``verify(parse("\\boxed{gt}"), parse(answer))``, each of the three steps under math-verify's own
    ``timeout_s`` alarm (the official code's 5 s for parse and for verify). Batches of at least
    ``inline_below`` items, or calls off the main thread, run in a pool of ``workers`` processes,
    with the same alarms and a hard kill (``item_limit_s``) for what an alarm cannot stop; smaller
    batches run inline. Call ``close()`` (or use ``with``) to stop the pool.
    """

    correct: float = 1.0
    wrong: float = -1.0
    missing_think_close: float = -0.5
    missing_think_open: float = -2.0
    timeout_s: float = 5.0
    workers: int = 2
    inline_below: int = 16

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
