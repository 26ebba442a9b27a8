"""The record schema shared by the embedded task world and real data.

One ``Record`` is one prompt with its reference answer and, for SFT data, one teacher
response. Real data (verl-style RL parquet/jsonl, messages-style SFT data) is mapped onto the
same fields by ``klear_lab.data.sources.file``.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from klear_lab.errors import DataError


@dataclass(frozen=True)
class Record:
    """One prompt (+ optional teacher response) of a task.

    Attributes:
        uid: stable id, unique within a source (``source/index``).
        source: name of the source that produced the record (``arith_r1``, a file's data_source...).
        task: verifier family: ``math`` (boxed answers) or ``code`` (python function + tests).
        prompt: the user turn as plain text (chat messages are flattened to their user content).
        answer: reference answer (math: the boxed value as a string; code: a reference program, or a verl
            record's JSON test spec).
        difficulty: integer level, 1 = easiest.
        response: teacher response in the reasoning format (``<think>...</think> answer``), if any.
        response_correct: whether the teacher response is correct, if known.
        tests: hidden test cases for code tasks (each ``{"input": [...], "output": ...}``, a function call,
            or ``{"stdin": str, "stdout": str}``, a whole program).
        meta: anything else carried through untouched.
        difficulty_known: whether ``difficulty`` was given (a file without a difficulty column reads as
            level 1, which a level band must not take for an annotation). Not part of the records' digest.
        origin: where a record read from a file came from (``data/train.jsonl: row 5``), for errors found
            after loading (``require_gradeable``); None for generated records. Not part of the digest.
    """

    uid: str
    source: str
    task: str
    prompt: str
    answer: str
    difficulty: int = 1
    response: str | None = None
    response_correct: bool | None = None
    tests: tuple[dict[str, Any], ...] = ()
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    difficulty_known: bool = field(default=True, compare=False, hash=False)
    origin: str | None = field(default=None, compare=False, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "uid": self.uid, "source": self.source, "task": self.task, "prompt": self.prompt,
            "answer": self.answer, "difficulty": self.difficulty, "response": self.response,
            "response_correct": self.response_correct, "tests": list(self.tests), "meta": self.meta,
        }


def records_digest(records: list[Record]) -> str:
    """A digest of ``records`` in order, every field (``meta`` too): what a run trained or was scored on.

    A run's config names its data (a file path, a world's seed) but not its contents; ``run.json``
    keeps this digest, so a resume refuses data edited since the start, and two runs can be checked to
    have read the same records. 16 hex digits of a SHA-256 over each field, length-prefixed (no field's
    text can pass for the next one's). The texts are hashed as they are, not JSON-escaped: ~4x faster
    on long chain-of-thought responses.
    """
    h = hashlib.sha256()
    for r in records:
        rest = _stable_json([r.difficulty, r.response_correct, list(r.tests), r.meta])
        for text in (r.uid, r.source, r.task, r.prompt, r.answer, r.response, rest):
            if text is None:
                h.update(b"\xff" * 8)
                continue
            data = text.encode("utf-8", "surrogatepass")
            h.update(len(data).to_bytes(8, "little"))
            h.update(data)
    return h.hexdigest()[:16]


def _stable_json(value: Any) -> str:
    """JSON of ``value`` that is the same in every process: sets sorted, keys sorted (by their text where
    they mix types), other objects by type name and ``str`` (a plugin source's ``meta`` may hold them)."""
    def plain(v: Any) -> Any:
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, (set, frozenset)):
            return sorted((plain(x) for x in v), key=lambda x: json.dumps(x, sort_keys=True, default=str))
        if v is None or isinstance(v, (str, int, float, bool)):
            return v
        return f"{type(v).__name__}:{v}"

    return json.dumps(plain(value), sort_keys=True)


def data_digests(train: list[Record] | None, held_out: list[Record]) -> dict[str, str]:
    """``{"train": ..., "eval": ...}`` digests of a run's training records (None: an eval run) and held-out
    records, as ``run.json`` keeps them under ``data``."""
    out = {} if train is None else {"train": records_digest(train)}
    return {**out, "eval": records_digest(held_out)}


def require_known_correctness(records: list[Record]) -> None:
    """A correctness filter needs ``response_correct``: with no record saying it, it would keep every
    record, and a "correct only" arm would silently train on the same data as its "mixed" twin."""
    if records and all(r.response_correct is None for r in records):
        raise ValueError(f"correct_only: none of the {len(records)} records says whether its response is "
                         "correct (response_correct is unset on all); annotate the data or drop correct_only")


# A code record's own test settings (a verl spec's ``timeout`` and ``max_test_cases``, paper §3.2), as
# Record.meta keys the code reward reads over its defaults.
TEST_TIMEOUT_KEY, MAX_TESTS_KEY = "test_timeout_s", "max_tests"


def code_limits_problem(timeout: Any, cap: Any, where: str = "meta", names: tuple[str, str] = (
        TEST_TIMEOUT_KEY, MAX_TESTS_KEY)) -> str | None:
    """What is wrong with a record's own per-test timeout (seconds) and test cap (None: unset), or None;
    ``where`` and ``names`` say where the user wrote them."""
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not 0 < timeout < math.inf):
        return f"{where} {names[0]!r} (the per-test timeout) must be a positive number of seconds, got {timeout!r}"
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float)) or not 1 <= cap < math.inf
                            or cap != int(cap)):  # 16.0: a parquet column with gaps holds floats
        return f"{where} {names[1]!r} (the test cap) must be an integer >= 1, got {cap!r}"
    return None


def own_test_limits(record: Record) -> tuple[float | None, int | None]:
    """A code record's own per-test timeout and test cap (None where it sets none).

    Raises:
        DataError: naming the record, for a value the sandbox cannot use.
    """
    timeout, cap = record.meta.get(TEST_TIMEOUT_KEY), record.meta.get(MAX_TESTS_KEY)
    problem = code_limits_problem(timeout, cap)
    if problem:
        raise DataError(f"code record {record.uid!r} of source {record.source!r}{_read_from(record)}: {problem}")
    return timeout, (None if cap is None else int(cap))


def require_gradeable(records: list[Record], what: str) -> None:
    """Every record a reward will grade needs something to grade against: a math record its reference
    answer (an empty one matches an empty ``\\boxed{}``), a code record its tests (without them scoring
    fails mid-run, after hours of training) and test settings it can use.

    Raises:
        DataError: naming how many records of ``what`` cannot be graded and the first one.
    """
    for r in records:
        if r.task == "code":
            try:
                own_test_limits(r)
            except DataError as exc:
                raise DataError(f"{what}: {exc}") from None
    bad = [r for r in records if (r.task == "code" and not r.tests) or (r.task == "math" and not r.answer.strip())]
    if bad:
        first = first_read(bad)
        why = _no_tests_hint(first) if first.task == "code" else "no reference answer (missing, null or blank)"
        raise DataError(f"{what}: {len(bad)} of {len(records)} records cannot be graded; the first, "
                        f"{first.uid!r} of source {first.source!r} ({first.task}){_read_from(first)}, has {why}")


def first_read(records: list[Record]) -> Record:
    """The record an error names as "the first": the lowest row of the first file the records were read from
    (``origin``), not the first after the data mix shuffled them, which changed with the seed; records not read
    from a file keep their order after those."""
    def place(item: tuple[int, Record]) -> tuple[int, str, int, int]:
        k, r = item
        read = file_and_row(r)
        return (0, *read, k) if read else (1, "", 0, k)

    return min(enumerate(records), key=place)[1]


def file_and_row(record: Record) -> tuple[str, int] | None:
    """The file and row a record was read from (its ``origin``, ``data/x.jsonl: row 5``), else None."""
    path, _, row = (record.origin or "").rpartition(": row ")
    return (path, int(row)) if path and row.isdigit() else None


def _read_from(record: Record) -> str:
    """``, read from data/x.jsonl: row 5`` for a record read from a file (as row errors name it), else ""."""
    return f", read from {record.origin}" if record.origin else ""


def _no_tests_hint(record: Record) -> str:
    """Why a code record has no tests, in its file's layout: a verl row's ground truth is a JSON spec
    (kept in ``answer``), a plain record lists its tests itself."""
    try:
        spec = json.loads(record.answer)
    except ValueError:
        spec = None
    if isinstance(spec, dict):
        return ("no tests (a verl spec needs 'inputs'/'outputs' stdin tests; 'functional'/'pytest' specs are not "
                "supported)")
    return ("no tests (a code record needs a non-empty 'tests' list: {\"input\": [arguments], \"output\": value} "
            "function calls or {\"stdin\": text, \"stdout\": text} whole programs)")
