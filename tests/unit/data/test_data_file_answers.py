"""A data row's ``answer`` left out or null reads as a blank one: accepted where no answer is needed (an SFT row
with a response, a code row graded by its tests), refused naming file, row and field where one is graded against
it (a math row without a response, a held-out row). A records row without ``answer`` was refused ("field
'answer': missing") even where ``"answer": ""`` trained."""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

from klear_lab.data.records import require_gradeable
from klear_lab.data.sources.file import FileSource
from klear_lab.data.sources.file_rows import ANSWER_NEEDED, HELD_OUT_ANSWER_NEEDED
from klear_lab.errors import DataError

ROOT = Path(__file__).resolve().parents[3]
ABSENT = {"missing": "missing", "null": "missing (null)", "blank": "empty"}  # how the answer is left out -> error
GOOD = {"prompt": "What is 1+1?", "answer": "2"}
SFT = {"prompt": "What is 2+2?", "response": "<think>2+2=4</think> \\boxed{4}"}
CODE = {"prompt": "Write f.", "task": "code", "tests": [{"input": [1], "output": 2}]}
CHAT = {"messages": [{"role": "user", "content": "Compute 3+3."},
                     {"role": "assistant", "content": "<think>6</think>\\boxed{6}"}]}
VERL = {"data_source": "math_src", "ability": "math", "prompt": [{"role": "user", "content": "2+3?"}],
        "reward_model": {"style": "rule"}}


def _without_answer(row: dict, how: str, key: str = "answer") -> dict:
    """``row`` with its answer left out (``missing``), null, or blank."""
    if how == "missing":
        return row
    return {**row, key: None if how == "null" else ""}


def _read(tmp_path: Path, rows: list[dict], split: str = "train", folder: str = "", fmt: str = "auto"):
    """The rows written as ``folder/rows.jsonl`` (one name, so uids match across folders) and read as a run reads
    the split: ``path`` serves both splits."""
    (tmp_path / folder).mkdir(exist_ok=True)
    path = tmp_path / folder / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, FileSource(path=str(path), format=fmt).records(0, split)


@pytest.mark.parametrize("row", [SFT, CODE, {**CODE, "response": "def f(x):\n    return x + 1"}, CHAT],
                         ids=["sft", "code", "code_sft", "messages"])
def test_a_row_that_needs_no_answer_reads_the_same_without_one(tmp_path, row):
    """Left out, null or blank: one record, stored with answer "" (its uid, meta and all)."""
    first = {**row, "answer": "1"}  # one layout per file: the first row's
    read = {how: _read(tmp_path, [first, _without_answer(row, how)], folder=how)[1] for how in ABSENT}
    assert read["missing"][1].answer == ""
    assert read["missing"][1].task == ("code" if "task" in row else "math")
    as_dicts = {how: [r.to_dict() for r in records] for how, records in read.items()}
    assert as_dicts["missing"] == as_dicts["null"] == as_dicts["blank"]


def _absent(how: str, columns: str | None) -> str:
    """The error's word for an answer left out ``how``; a top-level column the row lacks is named with the
    columns the row has (``columns``; None for a dotted column such as verl's)."""
    if how != "missing" or columns is None:
        return ABSENT[how]
    return f"missing (the row's columns: {columns}; name the column that holds it with the source's " \
           "`fields: {answer: COLUMN}`)"


@pytest.mark.parametrize("how", ABSENT)
def test_a_math_row_without_a_response_is_refused_without_an_answer(tmp_path, how):
    """It can only be graded (an RL prompt): refused when read, naming file, row and field."""
    with pytest.raises(DataError) as err:
        _read(tmp_path, [GOOD, _without_answer({"prompt": "What is 5+5?"}, how)])
    missing = _absent(how, "prompt")
    assert str(err.value) == f"{tmp_path / 'rows.jsonl'}: row 2: field 'answer': {missing}; {ANSWER_NEEDED}"


@pytest.mark.parametrize("how", ABSENT)
@pytest.mark.parametrize(("row", "fmt"), [(SFT, "records"), (CHAT, "messages")])
def test_a_held_out_math_row_needs_its_answer_even_with_a_response(tmp_path, how, row, fmt):
    """The eval split is scored against the answer: a blank one was refused later by uid only, without file
    or row; a left-out one now reads as blank and must not pass."""
    path, _ = _read(tmp_path, [_without_answer(row, how)], fmt=fmt)  # the train split takes it
    with pytest.raises(DataError) as err:
        _read(tmp_path, [_without_answer(row, how)], split="eval", fmt=fmt)
    columns = ", ".join(sorted(_without_answer(row, how)))
    assert str(err.value) == f"{path}: row 1: field 'answer': {_absent(how, columns)}; {HELD_OUT_ANSWER_NEEDED}"


def test_a_held_out_code_row_needs_tests_not_an_answer(tmp_path):
    _, records = _read(tmp_path, [CODE], split="eval")
    assert (records[0].answer, records[0].tests) == ("", tuple(CODE["tests"]))


@pytest.mark.parametrize("how", ABSENT)
def test_a_verl_math_row_needs_its_ground_truth(tmp_path, how):
    """verl rows have no response: left out, null or blank, the ground truth is refused alike."""
    row = VERL if how == "missing" else {**VERL, "reward_model": {**VERL["reward_model"], "ground_truth":
                                                                  None if how == "null" else ""}}
    with pytest.raises(DataError) as err:
        _read(tmp_path, [row])
    assert str(err.value) == (f"{tmp_path / 'rows.jsonl'}: row 1: field 'reward_model.ground_truth': "
                              f"{_absent(how, None)}; {ANSWER_NEEDED}")


@pytest.mark.parametrize("how", ABSENT)
def test_an_rl_run_refuses_sft_math_rows_without_an_answer(tmp_path, how):
    """An SFT row trains without an answer; RL grades its rollouts against it, so the run refuses it before
    training (``stages.rl`` checks its records so)."""
    path, records = _read(tmp_path, [GOOD, _without_answer(SFT, how)])
    with pytest.raises(DataError) as err:
        require_gradeable(records, "data.sources")
    assert str(err.value) == ("data.sources: 1 of 2 records cannot be graded; the first, 'rows/2' of source 'rows' "
                              f"(math), read from {path}: row 2, has no reference answer (missing, null or blank)")


def test_a_held_out_file_without_answers_is_refused_when_a_run_builds_its_eval_records(tmp_path):
    """Through the run's own path (``builders.build_eval_records``) the message names file, row and field."""
    from klear_lab.builders import build_eval_records
    from klear_lab.config.compose import compose

    path, _ = _read(tmp_path, [SFT])
    cfg = compose(ROOT / "experiments/quickstart/sft.yaml", [f"data.eval_sources=[{{name: file, path: {path}}}]"])
    with pytest.raises(DataError, match=rf"{path}: row 1: field 'answer': missing \(the row's columns: prompt, "
                                        rf"response; .*\); {HELD_OUT_ANSWER_NEEDED}"):
        build_eval_records(cfg)
