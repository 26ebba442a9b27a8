"""Rows of a data file mapped onto ``Record`` for :class:`klear_lab.data.sources.file.FileSource` (registers nothing).

One row at a time, by layout (``verl``, ``messages``, ``records``): typed field access that names file, row
and column in its errors, the row's task, its reference answer, and a code row's tests and limits.
"""

from __future__ import annotations

import json
import math
from typing import Any

from klear_lab.data.records import MAX_TESTS_KEY, TEST_TIMEOUT_KEY, Record, code_limits_problem
from klear_lab.errors import DataError

_MISSING = object()
_SHOWN = 20  # a wide row's columns are cut to this many in errors
TASKS = ("math", "code")


def _get(row: dict[str, Any], column: str) -> Any:
    value: Any = row
    for key in column.split("."):
        if not isinstance(value, dict) or key not in value:
            return _MISSING
        value = value[key]
    return value


class _Row:
    """Typed field access to one row, raising DataError naming file, row and column."""

    def __init__(self, row: Any, n: int, columns: dict[str, str], path: str) -> None:
        if not isinstance(row, dict):
            hint = " (rows in one JSON array go in a .json file; a .jsonl file holds one object per line)" \
                if isinstance(row, list) else ""
            raise DataError(f"{path}: row {n}: expected an object, got {type(row).__name__}{hint}")
        self.row, self.n, self.columns, self.path = row, n, columns, path

    def fail(self, key: str, why: str) -> DataError:
        return DataError(f"{self.path}: row {self.n}: field {self.columns.get(key, key)!r}: {why}")

    def raw(self, key: str) -> Any:
        return _get(self.row, self.columns[key]) if key in self.columns else _MISSING

    def absence(self, key: str) -> str:
        """How an absent field reads in errors: ``missing``, or ``missing (null)`` (a parquet row's absent
        field reads as None). A top-level column the row lacks is named with the columns it has: a file whose
        question is in ``question`` fails on ``prompt``, and the fix is ``fields: {prompt: question}``."""
        if self.raw(key) is not _MISSING:
            return "missing (null)"
        column = self.columns.get(key, key)
        if "." in column:
            return "missing"
        shown = ", ".join(sorted(map(str, self.row))[:_SHOWN]) or "none"
        return (f"missing (the row's columns: {shown}; name the column that holds it with the source's "
                f"`fields: {{{key}: COLUMN}}`)")

    def get(self, key: str, types: tuple[type, ...], default: Any = _MISSING) -> Any:
        value = self.raw(key)
        if value is _MISSING or value is None:
            if default is _MISSING:
                raise self.fail(key, self.absence(key))
            return default
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            names = "/".join(t.__name__ for t in types)
            raise self.fail(key, f"expected {names}, got {type(value).__name__}")
        return value


def to_record(row: Any, n: int, fmt: str, columns: dict[str, str], path: str, label: str,
              task: str, scored: bool = False) -> Record:
    """One row as a record. ``scored``: the rows are a held-out set (the ``eval`` split), which a reward grades
    whether or not a row has a response, so a math row there needs its reference answer."""
    r = _Row(row, n, columns, path)
    own = r.get("source", (str,), None)  # the row's data_source / source
    source = label if own is None else own
    kind = task if task != "auto" else _task_of(r, own or "")  # not from the file's name: decoded_eval.jsonl
    difficulty = r.get("difficulty", (int, float), None)
    if isinstance(difficulty, float):  # a parquet int column with gaps holds floats: 2.0 is level 2
        if not difficulty.is_integer():
            raise r.fail("difficulty", f"levels are whole numbers, got {difficulty}")
        difficulty = int(difficulty)
    if difficulty is not None and difficulty < 1:  # a 0-based file's easiest level would fall out of every band
        raise r.fail("difficulty", f"levels start at 1 (the easiest), got {difficulty}; shift the column by 1")
    base = {"uid": str(r.get("uid", (str, int), f"{label}/{n}")), "source": source, "task": kind,
            "difficulty": difficulty or 1, "difficulty_known": difficulty is not None, "origin": f"{path}: row {n}"}
    if fmt == "verl":
        fields = _verl_fields(r, kind)
    elif fmt == "messages":
        fields = _messages_fields(r, kind, scored)
    else:
        fields = _records_fields(r, kind, scored)
    if not fields["prompt"].strip():  # a cut column or a template that lost its question
        raise r.fail("messages" if fmt == "messages" else "prompt", "the prompt is empty")
    used = {c.split(".")[0] for c in columns.values()}
    meta = {k: v for k, v in row.items() if k not in used} | fields.pop("meta", {})
    return Record(**base, **fields, meta=meta)


def _task_of(r: _Row, row_source: str) -> str:
    """The row's task column (verl ``ability``), else ``code`` if the row has hidden tests or its own source
    names code (verl ``coder1_longcot``, ``LiveCodeBench``), else ``math``."""
    ability = r.get("task", (str,), "").strip().lower()
    if ability in TASKS:
        return ability
    has_tests = "tests" in r.columns and _get(r.row, r.columns["tests"]) not in (_MISSING, None, [])
    return "code" if has_tests or "code" in row_source.lower() else "math"


def other_tasks(rows: list[tuple[int, Any]], columns: dict[str, str]) -> list[tuple[int, str]]:
    """(row, value) of the rows whose task column (verl ``ability``) names neither math nor code
    (``physics``, ``logic``): ``_task_of`` reads them by their tests and source name instead."""
    column = columns.get("task")
    values = [(n, _get(row, column)) for n, row in rows if column and isinstance(row, dict)]
    return [(n, v) for n, v in values if isinstance(v, str) and v.strip() and v.strip().lower() not in TASKS]


ANSWER_NEEDED = "a math row without a response is graded against its reference answer"
HELD_OUT_ANSWER_NEEDED = "a held-out math row is graded against its reference answer"


def _answer(r: _Row, kind: str, needed_because: str | None) -> str:
    """A row's reference answer, "" where it has none (missing, null or blank). ``needed_because``: why the row
    must have one (a math row without a ``response`` is only graded; a held-out row is scored), None where it
    need not: a code row is graded by its tests, and an SFT row with a response trains without one (an RL run
    refuses such a math row later, naming its file and row: ``records.require_gradeable``)."""
    value = _whole(r.get("answer", (str, int, float), None))
    answer = "" if value is None else str(value)
    if needed_because and kind != "code" and not answer.strip():
        raise r.fail("answer", f"{'empty' if value is not None else r.absence('answer')}; {needed_because}")
    return answer


def _whole(value: Any) -> Any:
    """A float answer that is a whole number as an int, NaN as None (missing). pandas writes an int column with
    gaps as floats (NaN in the gaps), so a parquet answer of 58 read as 58.0: the answer "58.0"."""
    if not isinstance(value, float):
        return value
    if math.isnan(value):
        return None
    return int(value) if value.is_integer() and abs(value) <= 2**53 else value


def _needed_because(scored: bool, response: str | None) -> str | None:
    """Why a records row must have its answer: it is held out (scored), or it has no response to train on."""
    return HELD_OUT_ANSWER_NEEDED if scored else None if response else ANSWER_NEEDED


def _verl_fields(r: _Row, kind: str) -> dict[str, Any]:
    prompt = r.get("prompt", (str, list))
    if not isinstance(prompt, str):
        prompt = _last_turn(r, "prompt", prompt, "user")
    out: dict[str, Any] = {"prompt": prompt}
    if kind != "code":
        return {**out, "answer": _answer(r, kind, ANSWER_NEEDED)}
    spec = r.get("answer", (str, dict))
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise r.fail("answer", f"code ground truth is not JSON ({exc.msg})") from exc
    if not isinstance(spec, dict):
        raise r.fail("answer", f"code ground truth must be a JSON object, got {type(spec).__name__}")
    ins, outs = spec.get("inputs"), spec.get("outputs")  # stdin/stdout specs; others stay in answer
    tests: tuple = ()
    if ins is not None or outs is not None:
        if not (isinstance(ins, list) and isinstance(outs, list)):
            raise r.fail("answer", "code ground truth needs 'inputs' and 'outputs' as lists, got "
                         f"{type(ins).__name__} and {type(outs).__name__}")
        if len(ins) != len(outs):
            raise r.fail("answer", f"code ground truth has {len(ins)} 'inputs' but {len(outs)} 'outputs'")
        if not all(isinstance(x, str) for x in (*ins, *outs)):
            raise r.fail("answer", "code ground truth 'inputs'/'outputs' must be strings (a program's stdin "
                         "and expected stdout)")
        tests = tuple({"stdin": i, "stdout": o} for i, o in zip(ins, outs, strict=True))
    timeout, cap = spec.get("timeout"), spec.get("max_test_cases")  # the official reward's per-record settings
    problem = code_limits_problem(timeout, cap, "code ground truth", ("timeout", "max_test_cases"))
    if problem:
        raise r.fail("answer", problem)
    limits = {k: v for k, v in ((TEST_TIMEOUT_KEY, timeout), (MAX_TESTS_KEY, cap and int(cap))) if v is not None}
    return {**out, "answer": json.dumps(spec), "tests": tests, "meta": limits}


def _messages_fields(r: _Row, kind: str, scored: bool) -> dict[str, Any]:
    messages = r.get("messages", (list,))
    turns = [m for m in messages if isinstance(m, dict) and isinstance(m.get("content"), str)]
    if len(turns) != len(messages):
        raise r.fail("messages", "every turn must be an object with a string 'content'")
    last_bot = max((i for i, m in enumerate(turns) if m.get("role") == "assistant"), default=len(turns))
    prompt = _last_turn(r, "messages", turns[:last_bot], "user")
    response = _present(turns[last_bot]["content"]) if last_bot < len(turns) else None
    answer = _answer(r, kind, HELD_OUT_ANSWER_NEEDED if scored else None)  # a training chat row may have none
    return {"prompt": prompt, "answer": answer, "response": response,
            "response_correct": r.get("response_correct", (bool,), None)}


def _present(response: str | None) -> str | None:
    """A blank teacher response (a column a bad export emptied) is none: SFT skips the record with a warning, and
    refuses data where every response is blank, rather than training on end-of-sequence tokens alone."""
    return response if response is not None and response.strip() else None


def _last_turn(r: _Row, key: str, turns: list[Any], role: str) -> str:
    for m in reversed(turns):
        if isinstance(m, dict) and m.get("role") == role and isinstance(m.get("content"), str):
            return m["content"]
    raise r.fail(key, f"no {role} turn with string content")


def _records_fields(r: _Row, kind: str, scored: bool) -> dict[str, Any]:
    tests = r.get("tests", (list,), [])
    for k, t in enumerate(tests):
        function_test = isinstance(t, dict) and isinstance(t.get("input"), list) and "output" in t
        program_test = isinstance(t, dict) and isinstance(t.get("stdin"), str) and isinstance(t.get("stdout"), str)
        if not (function_test or program_test):
            raise r.fail(f"tests.{k}", "a test is {\"input\": [arguments], \"output\": value} (a function "
                         "call) or {\"stdin\": text, \"stdout\": text} (a whole program), got "
                         f"{json.dumps(t)[:80]}")
    prompt, response = r.get("prompt", (str,)), _present(r.get("response", (str,), None))
    return {"prompt": prompt, "answer": _answer(r, kind, _needed_because(scored, response)), "tests": tuple(tests),
            "response": response, "meta": dict(r.get("meta", (dict,), {})),
            "response_correct": r.get("response_correct", (bool,), None)}


def dropped_turns(rows: list[tuple[int, Any]], columns: dict[str, str], fmt: str) -> list[tuple[int, list[str]]]:
    """(row, roles of the turns its record leaves out) of each chat row that holds more than the record keeps: a
    record is one user turn (the last before the last assistant turn) and that reply, so a system prompt, earlier
    turns and turns after the reply are not trained or prompted with (``messages``, and a verl chat ``prompt``)."""
    column = columns.get("messages" if fmt == "messages" else "prompt")
    out = []
    for n, row in rows:
        turns = _get(row, column) if column and isinstance(row, dict) else None
        if not isinstance(turns, list) or not all(isinstance(m, dict) for m in turns):
            continue  # a plain-text prompt, or a bad row that to_record refused
        roles = [str(m.get("role")) for m in turns]
        reply = max((i for i, role in enumerate(roles) if role == "assistant" and fmt == "messages"),
                    default=len(roles))
        asked = max((i for i, role in enumerate(roles[:reply]) if role == "user"), default=None)
        left = [role for i, role in enumerate(roles) if i not in (asked, reply)]
        if left:
            out.append((n, left))
    return out
