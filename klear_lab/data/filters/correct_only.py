"""``correct_only``: drop records whose teacher response is known to be wrong."""

from __future__ import annotations

from dataclasses import dataclass

from klear_lab.data.records import Record, require_known_correctness
from klear_lab.registry import DIFFICULTY_FILTER


@DIFFICULTY_FILTER.register("correct_only")
@dataclass(frozen=True)
class CorrectOnlyFilter:
    """Keep records unless ``response_correct`` is False (paper Table 2, "True" = correct CoT only).

    Records with unknown correctness (``None``) are kept; a source where none is known is refused.
    """

    def __call__(self, records: list[Record]) -> list[Record]:
        require_known_correctness(records)
        return [r for r in records if r.response_correct is not False]
