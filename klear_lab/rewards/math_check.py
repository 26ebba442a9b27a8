r"""Math answer equivalence with math-verify (registers nothing; torch-free, runs in pool workers).

Mirrors the official Klear-Reasoner ``math_dapo.compute_score`` (arXiv 2508.07629; paper.md §3.1): a quick
string match against the ground truth, else ``verify(parse("\\boxed{gt}"), parse(answer))``. Its quick match
compares the parsed answer; ours (:func:`exact_match`) the last ``\\boxed{}`` text before parsing, which
saves the parse. Either way a match is the ground truth's own text; anything else goes to ``verify``.
"""

from __future__ import annotations

import math
import threading

from klear_lab.rewards.base import last_boxed


def exact_match(answer: str, ground_truth: str) -> bool:
    r"""Fast path: the last ``\\boxed{}`` content equals the ground truth (whitespace-stripped)."""
    boxed = last_boxed(answer)
    return boxed is not None and boxed.strip() == ground_truth.strip()


def equivalent(answer: str, ground_truth: str, timeout_s: float | None) -> bool:
    r"""math-verify equivalence of ``answer`` (free text, usually with ``\\boxed{}``) and ``ground_truth``.

    Args:
        answer: the text after the last ``</think>``.
        ground_truth: the reference answer without ``\\boxed{}``.
        timeout_s: math-verify's own (``signal.alarm``) limit for parse and for verify; only
            usable in a main thread, so it is ignored (None) anywhere else.

    Returns:
        True when math-verify finds the two equal; False when not, when nothing parses, or when
        math-verify times out or fails.
    """
    from math_verify import parse, verify  # lazy: ~0.6 s import (sympy)

    limit = _alarm_seconds(timeout_s)
    pred = parse(answer, parsing_timeout=limit)
    if not pred:
        return False
    gold = parse("\\boxed{" + ground_truth + "}", parsing_timeout=limit)
    return bool(gold) and bool(verify(gold, pred, timeout_seconds=limit))


def warm_up() -> None:
    """Import math-verify (and sympy) ahead of the first item; a pool worker initializer."""
    import math_verify  # noqa: F401


def equivalent_item(item: tuple[str, str, float | None]) -> bool:
    """Pool entry point: ``equivalent(*item)`` (module-level so that it pickles by reference)."""
    return equivalent(*item)


def _alarm_seconds(timeout_s: float | None) -> int | None:
    if timeout_s is None or threading.current_thread() is not threading.main_thread():
        return None
    return max(1, math.ceil(timeout_s))  # signal.alarm takes whole seconds
