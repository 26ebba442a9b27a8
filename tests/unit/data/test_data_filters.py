"""Offline record filters, incl. the paper's Table 2 arms (easy/hard x only-correct/mixed)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

from klear_lab.data.records import Record
from klear_lab.errors import ConfigError
from klear_lab.registry import DIFFICULTY_FILTER


def _records() -> list[Record]:
    """Levels 1-3, each with a correct, a wrong and an unlabeled response; pass rates on some."""
    out = []
    for level in (1, 2, 3):
        for correct in (True, False, None):
            meta = {"pass_rate": 1.0 - level / 4} if correct is not None else {}
            uid = f"r/{level}/{correct}"
            out.append(Record(uid, "r", "math", "p", "1", level, "resp", correct, meta=meta))
    return out


def _keep(spec: dict) -> set[tuple[int, bool | None]]:
    return {(r.difficulty, r.response_correct) for r in DIFFICULTY_FILTER.build(spec)(_records())}


@pytest.mark.parametrize(("spec", "expected"), [
    ({"name": "band", "max_level": 1, "correct_only": True}, {(1, True), (1, None)}),  # easy / True
    ({"name": "band", "max_level": 1}, {(1, True), (1, False), (1, None)}),  # easy / Mixed
    ({"name": "band", "min_level": 3, "correct_only": True}, {(3, True), (3, None)}),  # hard / True
    ({"name": "band", "min_level": 3}, {(3, True), (3, False), (3, None)}),  # hard / Mixed
])
def test_table2_arms(spec, expected):
    assert _keep(spec) == expected


def test_overall_arms():
    every = {(lv, c) for lv in (1, 2, 3) for c in (True, False, None)}
    assert _keep({"name": "none"}) == _keep({"name": "band"}) == every
    assert _keep({"name": "correct_only"}) == _keep({"name": "band", "correct_only": True}) == {
        (lv, c) for lv, c in every if c is not False}


def test_pass_rate_band_drops_unannotated():
    # pass rates: level 1 -> 0.75, level 2 -> 0.5, level 3 -> 0.25
    assert _keep({"name": "band", "max_pass_rate": 0.5}) == {(2, True), (2, False), (3, True), (3, False)}
    assert _keep({"name": "band", "min_pass_rate": 0.6, "correct_only": True}) == {(1, True)}


@pytest.mark.parametrize(("field", "value"),
                         [("min_level", 0), ("max_pass_rate", 1.5), ("min_pass_rate", -0.1)])
def test_band_validation_names_field(field, value):
    with pytest.raises(ConfigError, match=field):
        DIFFICULTY_FILTER.build({"name": "band", field: value})


def test_band_inverted_ranges():
    with pytest.raises(ConfigError, match="max_level"):
        DIFFICULTY_FILTER.build({"name": "band", "min_level": 3, "max_level": 2})
    with pytest.raises(ConfigError, match="max_pass_rate"):
        DIFFICULTY_FILTER.build({"name": "band", "min_pass_rate": 0.6, "max_pass_rate": 0.5})
