"""Shared reward types and response parsing (registers nothing).

Responses follow the reasoning format ``<think>...</think> answer``. Only the text after the
LAST ``</think>`` is judged (Klear-Reasoner, arXiv 2508.07629, §3.1; official ``math_dapo``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from klear_lab.data.records import Record

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


@dataclass(frozen=True)
class RewardOutput:
    """The verdict on one completion.

    Attributes:
        score: the scalar reward fed to the advantage estimator.
        acc: True iff the completion is fully correct (score equals the reward's "correct"
            value); the positives of the α SFT term and the ``acc`` group-filter metric.
        format_ok: the response has the expected shape (both think tags; for code, also a
            fenced ``python`` block after ``</think>``).
        info: a short reason for debugging and sample tables (``exact``, ``no </think>``...).
    """

    score: float
    acc: bool
    format_ok: bool
    info: str = ""


class RewardFn(Protocol):
    """A reward: completions and their records in, one ``RewardOutput`` per completion out.

    A reward that needs something of the machine (``code``: bubblewrap) may also define ``unavailable() ->
    str | None``: why it cannot run here, with how to get what is missing, or None. A run that would call it
    then refuses to start (exit 2, no run directory), ``--dry-run`` marks it NOT AVAILABLE HERE and a sweep
    refuses to start (``reward_checks.unavailable_rewards``).
    """

    def __call__(self, completions: list[str], records: list[Record]) -> list[RewardOutput]:
        """Return one output per completion; ``records[i]`` holds the reference of ``completions[i]``."""
        ...


def split_think(text: str) -> tuple[str | None, str]:
    """Split a response at its last ``</think>``.

    Returns:
        ``(think, answer)``: the text before and after the last ``</think>``; ``(None, text)``
        when the response has no ``</think>``.
    """
    head, sep, tail = text.rpartition(THINK_CLOSE)
    if not sep:
        return None, text
    return head, tail


def answer_part(text: str) -> str:
    """Text after the last ``</think>`` (the whole text when there is none)."""
    return split_think(text)[1]


def think_tag_penalty(
    text: str, missing_close: float, missing_open: float
) -> RewardOutput | None:
    """Format check in the order of §3.1: no ``</think>`` first, then no ``<think>``.

    Args:
        text: the full response.
        missing_close: score when ``</think>`` is absent (e.g. truncated), paper code −0.5.
        missing_open: score when ``<think>`` is absent, paper code −2.0.

    Returns:
        The penalty output, or None when both tags are present.
    """
    if THINK_CLOSE not in text:
        return RewardOutput(missing_close, False, False, "no </think>")
    if THINK_OPEN not in text:
        return RewardOutput(missing_open, False, False, "no <think>")
    return None


def last_boxed(text: str) -> str | None:
    r"""Content of the last ``\boxed{...}`` (or ``\fbox{...}``), with nested braces; None if absent."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None  # unbalanced: treat as missing


def check_batch(completions: Sequence[str], records: Sequence[Record]) -> None:
    """Raise ValueError unless there is one record per completion."""
    if len(completions) != len(records):
        raise ValueError(
            f"got {len(completions)} completions but {len(records)} records; pass one record per completion"
        )
