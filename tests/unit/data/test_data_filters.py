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


@pytest.mark.parametrize("spec", [{"name": "correct_only"}, {"name": "band", "correct_only": True}])
def test_a_correctness_filter_refuses_records_that_do_not_say(spec, tmp_path):
    """It kept them all: a "True" arm trained on its "Mixed" twin's data, and data/correct_frac read 1.0."""
    unknown = [r for r in _records() if r.response_correct is None]
    with pytest.raises(ValueError, match="none of the 3 records says whether its response is correct"):
        DIFFICULTY_FILTER.build(spec)(unknown)
    assert DIFFICULTY_FILTER.build(spec)(unknown[:1] + [_records()[0]])  # one known is enough to filter

    import json

    from klear_lab.builders import build_train_records
    from klear_lab.config.compose import compose
    from klear_lab.errors import DataError

    path = tmp_path / "unlabelled.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"p{i}", "answer": "1", "response": "r"}) + "\n" for i in range(3)))
    from pathlib import Path

    cfg = compose(Path(__file__).resolve().parents[3] / "experiments/quickstart/sft.yaml",
                  [f"data.sources=[{{name: file, path: {path}, format: records}}]", f"data.filter={spec}"])
    with pytest.raises(DataError, match=r"data.filter '\w+' on source 'file' of data.sources.0 \(.*unlabelled.jsonl\): "
                                                  r"correct_only: none of the 3"):
        build_train_records(cfg)


def test_pass_rate_bounds_on_a_source_without_pass_rates_are_refused(tmp_path):
    """They dropped every record: the paper's released code set is already filtered and has no pass_rate,
    so a Figure 4 "filter" arm trained on nothing."""
    import json
    from pathlib import Path

    from klear_lab.builders import build_train_records
    from klear_lab.config.compose import compose
    from klear_lab.errors import DataError

    band = DIFFICULTY_FILTER.build({"name": "band", "min_pass_rate": 0.5})
    with pytest.raises(ValueError, match="none of the 3 records has a pass rate"):
        band([r for r in _records() if "pass_rate" not in r.meta])
    assert band(_records())  # some rated: those in the band are kept
    path = tmp_path / "unrated.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"p{i}", "answer": "1"}) + "\n" for i in range(3)))
    cfg = compose(Path(__file__).resolve().parents[3] / "experiments/quickstart/rl.yaml",
                  [f"data.sources=[{{name: file, path: {path}, format: records}}]",
                   "data.filter={name: band, min_pass_rate: 0.5}"])
    with pytest.raises(DataError, match=r"on source 'file' of data.sources.0 \(.*unrated.jsonl\): "
                                              r"min_pass_rate/max_pass_rate: none of the 3"):
        build_train_records(cfg)


def test_min_tests_drops_code_records_with_too_few_tests_and_keeps_math():
    """The paper's RL code data drops problems with fewer than 16 tests."""
    def code(uid: str, n: int) -> Record:
        return Record(uid, "c", "code", "p", "", tests=tuple({"input": [i], "output": i} for i in range(n)))

    mixed = [code("c/15", 15), code("c/16", 16), code("c/40", 40), *_records()[:2]]
    kept = DIFFICULTY_FILTER.build({"name": "band", "min_tests": 16})(mixed)
    assert [r.uid for r in kept] == ["c/16", "c/40", *(r.uid for r in _records()[:2])]
    assert DIFFICULTY_FILTER.build({"name": "band"})(mixed) == mixed  # 0: no bound
    with pytest.raises(ValueError, match=r"min_tests=16: none of the 2 code records .* \(the most is 15\)"):
        DIFFICULTY_FILTER.build({"name": "band", "min_tests": 16})([code("a", 3), code("b", 15)])
    with pytest.raises(ConfigError, match="min_tests"):
        DIFFICULTY_FILTER.build({"name": "band", "min_tests": -1})


def test_correct_only_needs_known_correctness_inside_the_band():
    """Labelled easy rows let a hard/True arm keep every unlabelled hard row: the same data as hard/Mixed."""
    easy = [Record(uid=f"e{i}", source="m", task="math", prompt="p", answer="1", difficulty=1, response="r",
                   response_correct=bool(i % 2)) for i in range(4)]
    hard = [Record(uid=f"h{i}", source="m", task="math", prompt="p", answer="1", difficulty=3, response="r")
            for i in range(3)]
    with pytest.raises(ValueError, match="none of the 3 records says whether its response is correct"):
        DIFFICULTY_FILTER.build({"name": "band", "min_level": 3, "correct_only": True})(easy + hard)
    kept = DIFFICULTY_FILTER.build({"name": "band", "max_level": 1, "correct_only": True})(easy + hard)
    assert [r.uid for r in kept] == ["e1", "e3"]


def test_a_filter_that_does_not_return_records_is_refused_naming_it(monkeypatch):
    """A plugin filter returning a count failed with ``TypeError: object of type 'int' has no len()`` in
    build_train_records, naming neither the filter nor its file (found by a CLI hunt)."""
    from pathlib import Path

    import klear_lab.builders as builders
    from klear_lab.config.compose import compose
    from klear_lab.errors import ComponentError

    class Count:
        def __call__(self, records):
            return len(records)

    class Strings:
        def __call__(self, records):
            return [r.prompt for r in records]

    build = builders.build
    monkeypatch.setattr(builders, "build", lambda reg, spec: Count() if reg is DIFFICULTY_FILTER else build(reg, spec))
    cfg = compose(Path(__file__).resolve().parents[3] / "experiments/quickstart/sft.yaml", [])
    with pytest.raises(ComponentError, match=r"data.filter 'Count' .* returned int \(\d+\) on source"):
        builders.build_train_records(cfg)
    with pytest.raises(ComponentError, match=r"data.filter 'Count' \(.*test_data_filters.py:\d+\) returned int "
                                             r"\(9\) on source 's'; a difficulty filter returns the list of Records"):
        builders.filtered_records(Count(), _records(), "s")
    with pytest.raises(ComponentError, match=r"data.filter 'Strings' .* returned a str \('p'\) among its records"):
        builders.filtered_records(Strings(), _records(), "s")
    assert builders.filtered_records(lambda recs: tuple(recs[:2]), _records(), "s") == _records()[:2]


def test_level_bounds_on_a_file_without_difficulty_levels_are_refused(tmp_path):
    """A file without a difficulty column read every row as level 1: a Table 2 "easy" arm kept the whole pool
    and a "hard" one nothing (a review's file named the column ``level``). ``fields`` maps such a column."""
    import json

    from klear_lab.data.sources.file import FileSource

    path = tmp_path / "levels.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"p{i}", "answer": "1", "level": 1 + i % 2}) + "\n"
                            for i in range(4)))
    unlabelled = FileSource(path=str(path), format="records").records(0, "train")
    assert [r.difficulty for r in unlabelled] == [1, 1, 1, 1] and not any(r.difficulty_known for r in unlabelled)
    for bounds in ({"max_level": 1}, {"min_level": 2}):
        with pytest.raises(ValueError, match="min_level/max_level: none of the 4 records has a difficulty level"):
            DIFFICULTY_FILTER.build({"name": "band", **bounds})(unlabelled)
    assert len(DIFFICULTY_FILTER.build({"name": "band"})(unlabelled)) == 4  # no level bound: nothing to refuse
    mapped = FileSource(path=str(path), format="records", fields={"difficulty": "level"}).records(0, "train")
    assert [r.difficulty for r in DIFFICULTY_FILTER.build({"name": "band", "max_level": 1})(mapped)] == [1, 1]
    assert all(r.difficulty_known for r in _records())  # the world's records carry their levels
    partly = [*mapped[:2], *unlabelled[2:]]
    with pytest.warns(UserWarning, match="2 of the 4 records have no difficulty level and are taken as level 1"):
        DIFFICULTY_FILTER.build({"name": "band", "min_level": 2})(partly)
