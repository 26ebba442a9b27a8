"""``band``: keep a difficulty band, optionally a pass-rate band and only correct responses."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from klear_lab.data.records import Record, require_known_correctness
from klear_lab.registry import DIFFICULTY_FILTER


@DIFFICULTY_FILTER.register("band")
@dataclass(frozen=True)
class BandFilter:
    """Keep records by difficulty level, pass rate (``min_pass_rate``: test-case filtering), correctness
    and, for code, number of tests (``min_tests``).

    Paper Table 2 (correctness × difficulty): each arm is one config, e.g. with the embedded levels 1-3:
    easy/True ``{name: band, max_level: 1, correct_only: true}``, easy/Mixed ``{max_level: 1}``,
    hard/True ``{min_level: 3, correct_only: true}``, hard/Mixed ``{min_level: 3}``. Paper Figure 4's
    test-case filtering keeps code prompts whose tests a strong model passes often enough:
    ``{name: band, min_pass_rate: 0.5}``; its RL code data also drops problems with fewer than 16 tests:
    ``{name: band, min_tests: 16}``. A record is kept when ``min_level <= difficulty <= max_level`` and
    every other bound set holds.

    Attributes:
        min_level: The lowest difficulty level kept (levels start at 1, the easiest).
        max_level: The highest difficulty level kept; None = no upper bound.
        min_pass_rate: Lowest ``meta["pass_rate"]`` kept (inclusive), a model-annotated difficulty like the
            paper's; when it or ``max_pass_rate`` is set, records without a pass rate are dropped, and a
            source where no record has one is refused (the arm would train on nothing, or, as with the
            paper's released, already-filtered code set, on other data than its twin). None = no bound.
        max_pass_rate: Highest ``meta["pass_rate"]`` kept (inclusive); None = no bound.
        correct_only: Drop records whose ``response_correct`` is False (None = unknown is kept; a source
            where none is known is refused).
        min_tests: Drop code records with fewer hidden tests (the paper's RL code data drops problems with
            fewer than 16); math records are kept. A source whose code records all fall short is refused.
    """

    min_level: int = 1
    max_level: int | None = None
    min_pass_rate: float | None = None
    max_pass_rate: float | None = None
    correct_only: bool = False
    min_tests: int = 0

    def __post_init__(self) -> None:
        if self.min_level < 1:
            raise ValueError(f"min_level must be >= 1, got {self.min_level}")
        if self.max_level is not None and self.max_level < self.min_level:
            raise ValueError(f"max_level must be >= min_level ({self.min_level}), got {self.max_level}")
        for name in ("min_pass_rate", "max_pass_rate"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        lo, hi = self.min_pass_rate, self.max_pass_rate
        if lo is not None and hi is not None and hi < lo:
            raise ValueError(f"max_pass_rate must be >= min_pass_rate ({lo}), got {hi}")
        if self.min_tests < 0:
            raise ValueError(f"min_tests must be >= 0, got {self.min_tests}")

    def _in_levels(self, record: Record) -> bool:
        return self.min_level <= record.difficulty <= (record.difficulty if self.max_level is None else self.max_level)

    def keep(self, record: Record) -> bool:
        """Whether ``record`` falls in the band."""
        if not self._in_levels(record):
            return False
        if self.correct_only and record.response_correct is False:
            return False
        if record.task == "code" and len(record.tests) < self.min_tests:
            return False
        if self.min_pass_rate is None and self.max_pass_rate is None:
            return True
        rate = record.meta.get("pass_rate")
        if rate is None:
            return False
        lo = 0.0 if self.min_pass_rate is None else self.min_pass_rate
        hi = 1.0 if self.max_pass_rate is None else self.max_pass_rate
        return lo <= rate <= hi

    def __call__(self, records: list[Record]) -> list[Record]:
        if self.correct_only:  # within the band: labelled easy rows must not let unlabelled hard ones through
            require_known_correctness([r for r in records if self._in_levels(r)])
        unknown = sum(not r.difficulty_known for r in records)
        if (self.min_level > 1 or self.max_level is not None) and unknown == len(records) > 0:
            raise ValueError(f"min_level/max_level: none of the {len(records)} records has a difficulty level (a "
                             "difficulty column, or `fields: {difficulty: COLUMN}` on the file source); without "
                             "one every record reads as level 1, the easiest; annotate the data or drop the bounds")
        if (self.min_level > 1 or self.max_level is not None) and unknown:
            warnings.warn(f"min_level/max_level: {unknown} of the {len(records)} records have no difficulty level "
                          "and are taken as level 1, the easiest", UserWarning, stacklevel=2)
        if (self.min_pass_rate is not None or self.max_pass_rate is not None) and records and all(
                r.meta.get("pass_rate") is None for r in records):
            raise ValueError(f"min_pass_rate/max_pass_rate: none of the {len(records)} records has a pass rate "
                             "(meta['pass_rate'], a pass_rate column); annotate the data or drop the bounds")
        code = [r for r in records if r.task == "code"]
        if self.min_tests and code and all(len(r.tests) < self.min_tests for r in code):
            most = max(len(r.tests) for r in code)
            raise ValueError(f"min_tests={self.min_tests}: none of the {len(code)} code records has that many tests "
                             f"(the most is {most}); lower min_tests or use data with more tests")
        return [r for r in records if self.keep(r)]
