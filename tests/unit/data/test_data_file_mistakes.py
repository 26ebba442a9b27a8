"""Mistakes a user bringing their own data makes, each refused naming what to write instead: a ``fields`` column
no row has (an optional one read as absent on every row), a ``quality_rank`` below 1, an empty ``path=``,
``{prompt:question}`` without its space, a ``.json`` file holding one object, and an RL record without an
answer named by file and row."""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

from klear_lab.data.records import require_gradeable
from klear_lab.data.sources.arith import ArithSource
from klear_lab.data.sources.arith_facts import ArithFacts
from klear_lab.data.sources.file import FileSource
from klear_lab.errors import ConfigError, DataError

ROOT = Path(__file__).resolve().parents[3]
ROWS = [{"prompt": f"What is {i}+1?", "answer": str(i + 1)} for i in range(3)]


def _jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _compose_error(tmp_path: Path, source: str, *more: str) -> str:
    from klear_lab.config.compose import compose

    _jsonl(tmp_path / "rows.jsonl", ROWS)
    with pytest.raises(ConfigError) as err:
        compose(ROOT / "experiments/quickstart/rl.yaml",
                [f"data.sources=[{{name: file, path: {tmp_path / 'rows.jsonl'}, {source}}}]", *more])
    return str(err.value)


def test_an_optional_field_mapped_to_a_column_no_row_has_is_refused(tmp_path):
    """``{difficulty: level}`` on a file without ``level`` read every row as level 1, in silence."""
    path = _jsonl(tmp_path / "rows.jsonl", ROWS)
    with pytest.raises(DataError) as err:
        FileSource(path=path, fields={"difficulty": "level"}).records(0, "train")
    assert str(err.value).startswith(f"{path}: fields: {{difficulty: level}}: no row (of 3 read) has a column "
                                     "'level'; the rows' columns: answer, prompt;")


def test_a_mapped_column_some_rows_have_keeps_the_per_row_default(tmp_path):
    path = _jsonl(tmp_path / "rows.jsonl", [{**ROWS[0], "level": 3}, ROWS[1]])
    records = FileSource(path=path, fields={"difficulty": "level"}).records(0, "train")
    assert [(r.difficulty, r.difficulty_known) for r in records] == [(3, True), (1, False)]


def test_a_dotted_column_names_what_its_object_holds(tmp_path):
    row = {"data_source": "s", "prompt": "2+3?", "reward_model": {"ground_truth": "5", "style": "rule"}}
    path = _jsonl(tmp_path / "verl.jsonl", [row])
    with pytest.raises(DataError, match=r"has a column 'reward_model\.level'; the rows' 'reward_model' holds: "
                                        r"ground_truth, style;"):
        FileSource(path=path, fields={"difficulty": "reward_model.level"}).records(0, "train")


@pytest.mark.parametrize("rank", [0, -3])
@pytest.mark.parametrize("make", [lambda r: FileSource(path="x.jsonl", quality_rank=r),
                                  lambda r: ArithSource(quality_rank=r), lambda r: ArithFacts(quality_rank=r)],
                         ids=["file", "arith", "arith_facts"])
def test_a_quality_rank_below_1_is_refused(make, rank):
    with pytest.raises(ValueError, match=rf"quality_rank must be a whole number >= 1 .*got {rank}"):
        make(rank)


def test_a_quality_rank_below_1_is_refused_at_compose_naming_the_key(tmp_path):
    assert "data.sources.0: source 'file': quality_rank must be" in _compose_error(tmp_path, "quality_rank: 0")


def test_an_empty_path_says_so_and_what_to_give(tmp_path):
    """``data.sources.0.path=`` said "expected str, got NoneType (None)", and the type said null was allowed."""
    message = _compose_error(tmp_path, "label: x", "data.sources.0.path=")
    assert ("data.sources.0.path: expected str, got null; path is empty (null): give the data, e.g. "
            "path=data/train.jsonl") in message


def test_a_fields_key_without_its_space_gets_the_yaml_hint(tmp_path):
    """``{prompt:question}`` is one YAML key holding null: it said "got dict ({'prompt:question': None})"."""
    message = _compose_error(tmp_path, "fields: {prompt:question}")
    assert "data.sources.0.fields: expected a mapping of str to str, got dict" in message
    assert ("YAML read `prompt:question` as one key: write `{prompt: question}`, with a space after each "
            "colon") in message
    with pytest.raises(ValueError, match=r"'answer' maps to no column \(None\); give the column it reads"):
        FileSource(path="x.jsonl", fields={"answer": None})
    with pytest.raises(ValueError, match=r"path is empty \(null\)"):
        FileSource(path=None)  # type: ignore[arg-type]  # from Python, where no config check ran
    with pytest.raises(ValueError) as err:  # was an AttributeError: 'str' object has no attribute 'items'
        FileSource(path="x.jsonl", fields="prompt:q answer:a")  # type: ignore[arg-type]
    assert str(err.value) == ("fields: expected a mapping of record keys to columns, got 'prompt:q answer:a'; e.g. "
                              "fields={'prompt': 'q', 'answer': 'a'}")
    with pytest.raises(ValueError, match=r"e\.g\. fields=\{'prompt': 'q', 'answer': 'a'\}$"):  # spaced: was ''
        FileSource(path="x.jsonl", fields="prompt: q, answer: a")  # type: ignore[arg-type]


def test_a_fields_line_without_its_space_gets_the_yaml_hint(tmp_path):
    """On a line of its own under ``fields:``, ``prompt:question`` is one text: it got only the type error."""
    from klear_lab.config.compose import compose

    rows = _jsonl(tmp_path / "rows.jsonl", ROWS)
    exp = tmp_path / "exp.yaml"
    exp.write_text(f"base: {ROOT / 'experiments/quickstart/rl.yaml'}\ndata:\n  sources:\n    - name: file\n"
                   f"      path: {rows}\n      fields:\n        prompt:question\n")
    with pytest.raises(ConfigError) as err:
        compose(exp)
    assert str(err.value) == (f"{exp}: data.sources.0.fields: expected a mapping of str to str, got str "
                              "('prompt:question'); YAML read `prompt:question` as one text: write "
                              "`{prompt: question}`, with a space after each colon")


def test_several_fields_lines_without_their_space_are_split_in_the_hint():
    """``prompt:q`` and ``answer:a`` on lines of their own read as one text: the hint mapped prompt to "q answer:a"."""
    from klear_lab.data.sources.file_checks import type_hint

    assert type_hint("fields", "prompt:q answer:a") == ("YAML read `prompt:q answer:a` as one text: write "
                                                         "`{prompt: q, answer: a}`, with a space after each colon")


def test_a_wrongly_typed_parameter_of_another_component_gets_no_hint(tmp_path):
    """The hook is the file source's own: a null ``label`` is allowed, a text ``limit`` gets the type error alone."""
    message = _compose_error(tmp_path, "limit: many")
    assert message.endswith("data.sources.0.limit: expected int or null, got str ('many')")


@pytest.mark.parametrize("indent", [None, 2], ids=["one_line", "pretty"])
def test_a_json_file_holding_one_object_says_it_wants_rows(tmp_path, indent):
    """It said "row 1: field 'prompt': missing" (one line), or "row 1: invalid JSON" (pretty-printed)."""
    path = tmp_path / "wrapped.json"
    path.write_text(json.dumps({"data": ROWS, "version": 1}, indent=indent))
    with pytest.raises(DataError) as err:
        FileSource(path=str(path)).records(0, "train")
    assert str(err.value).startswith(f"{path}: the file is one JSON object (keys 'data', 'version'), not rows: a "
                                     ".json file holds an array of row objects")
    assert "its 'data' holds 3 objects: save that list as the file" in str(err.value)


def test_a_jsonl_file_whose_one_row_wraps_the_rows_says_to_write_one_per_line(tmp_path):
    """``{"data": [...]}`` on one line of a ``.jsonl`` said only "row 1: field 'prompt': missing (the row's columns:
    data ...)" (a walkthrough)."""
    path = tmp_path / "wrapped.jsonl"
    path.write_text(json.dumps({"data": ROWS}) + "\n")
    with pytest.raises(DataError) as err:
        FileSource(path=str(path)).records(0, "train")
    assert str(err.value).startswith(f"{path}: the file's one row wraps the rows: its 'data' holds 3 objects; a "
                                     ".jsonl file holds one row object per line: write each of them on a line")
    assert "Read as one row, it fails" in str(err.value) and "field 'prompt': missing" in str(err.value)


@pytest.mark.parametrize("row", [
    {"messages": [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}], "task": 5},
    {"prompt": [{"role": "user", "content": "1+1?"}], "reward_model": {}, "data_source": "m"},
], ids=["messages", "verl"])
@pytest.mark.parametrize("limit", [None, 1])
def test_a_chat_row_is_not_taken_for_a_wrapper(tmp_path, row, limit):
    """A messages row's ``messages`` and a verl row's ``prompt`` are lists of objects too: a one-row file's real
    error (or, with ``limit: 1``, a longer file's) was blamed on the file's shape (a review)."""
    path = tmp_path / "chat.jsonl"
    path.write_text((json.dumps(row) + "\n") * (2 if limit else 1))
    with pytest.raises(DataError) as err:
        FileSource(path=str(path), limit=limit).records(0, "train")
    assert "wraps the rows" not in str(err.value) and str(err.value).startswith(f"{path}: row 1: ")


@pytest.mark.parametrize("indent", [None, 2], ids=["one_line", "pretty"])
def test_a_json_file_holding_one_row_object_reads_as_one_row(tmp_path, indent):
    path = tmp_path / "one.json"
    path.write_text(json.dumps(ROWS[0], indent=indent))
    assert [r.answer for r in FileSource(path=str(path)).records(0, "train")] == ["1"]


def test_an_ungradeable_rl_record_names_its_file_and_row(tmp_path):
    """An SFT row (a response, no answer) loads; RL refused it naming only its uid (``'rows/2'``)."""
    rows = [ROWS[0], {"prompt": "2+2?", "response": "<think>4</think> \\boxed{4}"}]
    path = _jsonl(tmp_path / "rows.jsonl", rows)
    with pytest.raises(DataError, match=rf"the first, 'rows/2' of source 'rows' \(math\), read from {path}: row 2, "
                                        "has no reference answer"):
        require_gradeable(FileSource(path=path).records(0, "train"), "data.sources")


def test_a_node_read_for_both_splits_may_map_a_training_column_its_held_out_file_lacks(tmp_path):
    """One node with ``path`` and ``eval_path`` (the README's form) whose ``fields`` maps ``response``: the held-out
    file has no solutions, and was refused (a review), as was eval of runs trained before the check."""
    train = _jsonl(tmp_path / "train.jsonl", [{"question": "1+1?", "final": "2", "solution": "\\boxed{2}"}])
    held_out = _jsonl(tmp_path / "test.jsonl", [{"question": "2+2?", "final": "4"}])
    node = FileSource(path=train, eval_path=held_out, fields={"prompt": "question", "answer": "final",
                                                              "response": "solution"})
    assert [r.answer for r in node.records(0, "eval")] == ["4"]
    assert [r.response for r in node.records(0, "train")] == ["\\boxed{2}"]


def test_a_column_only_rows_past_limit_have_is_not_a_misspelling(tmp_path):
    """A data-size sweep over ``limit``: its small arms read rows without ``level``, whose name is right."""
    rows = [*ROWS, {**ROWS[0], "level": 3}]
    path = _jsonl(tmp_path / "sparse.jsonl", rows)
    records = FileSource(path=path, fields={"difficulty": "level"}, limit=2).records(0, "train")
    assert [r.difficulty_known for r in records] == [False, False]


def test_a_wrapped_json_with_fields_says_it_wants_rows(tmp_path):
    """With ``fields`` set, the missing mapped column was reported before the file's shape (a review)."""
    path = tmp_path / "wrapped.json"
    path.write_text(json.dumps({"data": [{"question": "1+1?", "final": "2"}] * 3}))
    with pytest.raises(DataError, match=r"the file is one JSON object .*its 'data' holds 3 objects"):
        FileSource(path=str(path), fields={"prompt": "question", "answer": "final"}).records(0, "train")


def test_an_ordinary_method_named_explain_type_error_is_not_called(tmp_path, registries_restored):
    """A plugin defining it without @classmethod crashed validation with a TypeError traceback (a review)."""
    from dataclasses import dataclass

    from klear_lab.config.compose import compose
    from klear_lab.registry import SOURCE

    @SOURCE.register("explain_method_source")
    @dataclass(frozen=True)
    class Source:
        limit: int = 1

        def explain_type_error(self, key, value):  # no @classmethod: needs an instance
            return "never asked"

    with pytest.raises(ConfigError) as err:
        compose(ROOT / "experiments/quickstart/sft.yaml", ["data.sources=[{name: explain_method_source, limit: x}]"])
    assert str(err.value).endswith("data.sources.0.limit: expected int, got str ('x')")
