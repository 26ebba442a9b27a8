"""``none``: keep every record."""

from __future__ import annotations

from dataclasses import dataclass

from klear_lab.data.records import Record
from klear_lab.registry import DIFFICULTY_FILTER


@DIFFICULTY_FILTER.register("none")
@dataclass(frozen=True)
class NoFilter:
    """Keep all records, correct and incorrect, at every difficulty (the paper's final SFT recipe, §4.2)."""

    def __call__(self, records: list[Record]) -> list[Record]:
        return list(records)
