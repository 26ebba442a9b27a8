"""Real data from a file, a saved ``datasets`` directory or a hub id, mapped onto ``Record``."""

from __future__ import annotations

import codecs
import json
import re
import warnings
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from klear_lab.data.records import Record
from klear_lab.data.sources.base import SPLITS
from klear_lab.data.sources.file_checks import (
    PATH_FORMS,
    check_mapped_columns,
    check_params,
    one_object_error,
    type_hint,
)
from klear_lab.data.sources.file_rows import dropped_turns, other_tasks, to_record
from klear_lab.errors import DataError, hub_offline, load_error
from klear_lab.registry import SOURCE

FORMATS = ("auto", "verl", "messages", "records")
TASKS = ("auto", "math", "code")
_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
# Record field -> column (dotted paths reach into nested objects) for each layout; ``fields`` overrides.
COLUMNS: dict[str, dict[str, str]] = {
    "verl": {"prompt": "prompt", "answer": "reward_model.ground_truth", "source": "data_source",
             "task": "ability", "difficulty": "difficulty", "uid": "uid"},
    "messages": {"messages": "messages", "answer": "answer", "source": "source", "task": "task",
                 "difficulty": "difficulty", "response_correct": "response_correct", "uid": "uid"},
    "records": {k: k for k in ("uid", "source", "task", "prompt", "answer", "difficulty", "response",
                               "response_correct", "tests", "meta")},
}


@SOURCE.register("file")
@dataclass(frozen=True)
class FileSource:
    """Records read from real data: verl RL parquet/jsonl, messages-style SFT data, or plain records.

    Serves the paper's real-data runs (paper.md §6: MathSub-30K / CodeSub-15K in verl layout; SFT data as
    chat messages). Code ground truth is the JSON test spec, kept verbatim in ``answer``; its
    ``inputs``/``outputs`` pairs also fill ``tests``, and its optional ``timeout`` (seconds per test) and
    ``max_test_cases`` go to ``meta`` (``test_timeout_s``, ``max_tests``) for the code reward's
    ``record_limits``. Loading is all-or-nothing; the seed is unused (file order is kept).
    """

    path: str = ""
    """The data: a ``.jsonl``/``.json``/``.parquet`` file (relative to the working directory; ``~`` expands),
    a ``datasets.save_to_disk`` directory, or (``HF_HUB_OFFLINE`` unset) a hub id, its ``train`` split.
    Required: null (``path=`` with nothing after it) is refused when the config is checked, saying what to
    give, and an empty text when the file is read."""
    eval_path: str | None = None
    """What the ``eval`` split (``data.eval_sources``) reads, in the forms of ``path``; None = ``path``."""
    format: str = "auto"
    """Row layout: ``verl`` (``prompt``, ``reward_model.ground_truth``, ``data_source``, ``ability``),
    ``messages`` (chat ``messages``), ``records`` (``Record`` fields), or ``auto``: ``messages`` if the
    first row has ``messages``, ``verl`` if it has ``reward_model``, else ``records``."""
    fields: dict[str, str] = field(default_factory=dict)
    """Record field -> column, over the layout's mapping; dotted paths reach into nested objects
    (``{prompt: question, answer: solution}``). A column no row of the training file has is refused (a misspelt
    optional one would read as absent on every row). ``{prompt:question}`` without the space is one key,
    ``prompt:question``, holding null, and on a line of its own it is one text: both are told how to write it."""
    task: str = "auto"
    """``math`` or ``code`` for every row, or ``auto``: the row's task column (verl ``ability``) if it says
    one, else ``code`` if the row has tests or its ``source``/``data_source`` contains "code", else ``math``."""
    quality_rank: int = 1
    """Rank (>= 1) for the ``top_k`` data mix, 1 = best (as the paper ranks its sources, paper.md §4.2 Tables 4-5)."""
    limit: int | None = None
    """Read only the first ``limit`` rows (>= 1) of the split's file; None = all."""
    label: str | None = None
    """Names the records' source (per-source metrics such as ``val/<label>/acc``, ``weighted`` mix keys),
    over the rows' ``source``/``data_source``; None: that column, else the file name (the mix: ``file``)."""

    def __post_init__(self) -> None:
        check_params(self)
        if self.label is not None and not self.label.strip():
            raise ValueError("label must be a non-empty name or null")
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {self.format!r}")
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.task!r}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1 or None, got {self.limit}")
        known = set().union(*COLUMNS.values())
        if unknown := sorted(set(self.fields) - known):
            raise ValueError(f"fields has unknown record fields {unknown}; known: {sorted(known)}")

    @classmethod
    def explain_type_error(cls, key: str, value: Any) -> str | None:
        """What a wrongly typed ``path`` or ``fields`` usually means (the config check adds it to its error)."""
        return type_hint(key, value)

    def records(self, seed: int, split: str) -> list[Record]:
        """All rows of the split's file as records (first ``limit`` rows if set)."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        path = getattr(self, self.path_field(split))
        if not path:
            raise DataError(f"source 'file': no path set for the {split} split: give {self.path_field(split)} "
                            f"({PATH_FORMS})")
        every_row = read_rows(path)
        rows = every_row[: self.limit]
        fmt = self.format if self.format != "auto" else detect_format(rows)
        columns = {**COLUMNS[fmt], **self.fields}
        label = self.label or Path(path).stem or path
        try:
            records = [to_record(row, i, fmt, columns, path, label, self.task, scored=split == "eval")
                       for i, row in rows]
        except DataError as exc:
            raise one_object_error(path, rows, exc) from None
        if split == "train":  # a node read for both splits maps training columns its held-out file lacks
            check_mapped_columns(path, every_row, self.fields)  # rows past `limit` too: the name is not wrong
        warn_repeated_uids(path, [n for n, _ in rows], records)
        if fmt in ("messages", "verl") and (dropped := dropped_turns(rows, columns, fmt)):
            warn_dropped_turns(path, dropped)
        if self.task == "auto" and (others := other_tasks(rows, columns)):
            first = next(r.task for (n, _), r in zip(rows, records) if n == others[0][0])
            warn_other_tasks(path, others, first)
        # the label names the source whatever the file's columns say (after they chose each task)
        return [replace(r, source=self.label) for r in records] if self.label else records

    def path_field(self, split: str) -> str:
        """The field holding the file ``split`` reads: ``path``, or for ``eval`` ``eval_path`` when set."""
        return "eval_path" if split == "eval" and self.eval_path else "path"

    def unavailable(self, split: str) -> tuple[str, str] | None:
        """(field, ``path: why``) when the file ``split`` reads cannot be read on this machine, else None."""
        field_name = self.path_field(split)
        path = getattr(self, field_name) or ""
        why = unavailable(path)
        return (field_name, f"{path}: {why}") if why else None


def warn_repeated_uids(path: str, row_numbers: list[int], records: list[Record]) -> None:
    """Rows sharing a uid share their per-problem seeds (avg@k sampling, code test subsets): legal, but
    usually a copied row or a uid column that is not one."""
    first: dict[str, int] = {}
    repeats = []
    for n, r in zip(row_numbers, records, strict=True):
        if r.uid in first:
            repeats.append((n, first[r.uid], r.uid))
        first.setdefault(r.uid, n)
    if repeats:
        n, earlier, uid = repeats[0]
        warn_once(f"{path}: {len(repeats)} row(s) repeat an earlier row's uid (the first: row {n} repeats "
                  f"row {earlier}'s {uid!r}); rows sharing a uid share their per-problem seeds")


def warn_dropped_turns(path: str, dropped: list[tuple[int, list[str]]]) -> None:
    """Chat rows with turns their records leave out (``file_rows.dropped_turns``): say how many, and which."""
    n, roles = dropped[0]
    counts = ", ".join(f"{k} {role}" for role, k in Counter(roles).items())
    warn_once(f"{path}: {len(dropped)} row(s) hold turns their record leaves out (the first: row {n}, {counts}): a "
              "record is the last user turn before the last assistant turn and that reply; a system prompt or an "
              "earlier turn is neither trained on nor shown to the model (the chat template's own default applies)")


def warn_other_tasks(path: str, others: list[tuple[int, str]], first_read_as: str) -> None:
    """Rows whose task column names a task klear-lab has no grader for (``others``: row, value) are read as
    math or code (by their tests and source name) and graded so: say how many, and how the first was read."""
    values = ", ".join(repr(v) for v in sorted({v for _, v in others}))
    warn_once(f"{path}: {len(others)} row(s) name a task that is neither math nor code ({values}; the first: row "
              f"{others[0][0]}, read as {first_read_as}): each is read as code if it has tests or its source names "
              "code, else as math (graded by math-verify); set the source's task: to say which, or drop those rows")


_WARNED: set[str] = set()


def warn_once(message: str) -> None:
    """A warning about a file's rows, once per process: a run reads a file it trains and evaluates on twice,
    and the ``catch_warnings`` blocks between the reads (ours, the libraries') reset Python's own registry of
    warnings shown. The message names the counts and the first row: a file edited since warns again."""
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, UserWarning, stacklevel=3)


def detect_format(rows: list[tuple[int, Any]]) -> str:
    first = rows[0][1] if rows and isinstance(rows[0][1], dict) else {}
    return "messages" if "messages" in first else "verl" if "reward_model" in first else "records"


def read_rows(path: str) -> list[tuple[int, Any]]:
    """(1-based row number, row) pairs; JSON lines count physical lines. Raises DataError."""
    p = Path(path).expanduser()  # ~/data/x.jsonl in a YAML file: no shell expands it
    if p.is_dir():
        return list(enumerate(_load_hf(str(p), from_disk=True), 1))
    if p.is_file():
        if p.suffix == ".parquet":
            import pyarrow.parquet as pq

            try:
                return list(enumerate(pq.read_table(p).to_pylist(), 1))
            except Exception as exc:  # noqa: BLE001 - any pyarrow failure is a bad file
                raise DataError(f"{path}: cannot read parquet: {exc}") from exc
        return _read_json(p)
    missing = unavailable(path)
    if missing:
        raise DataError(f"data file {path}: {missing}")
    return list(enumerate(_load_hf(path, from_disk=False), 1))


def unavailable(path: str) -> str | None:
    """Why ``path`` cannot be read here (a missing file; a hub id while the hub is off), or None: it
    exists, or it is a hub id the hub may serve."""
    p = Path(path).expanduser()
    if p.exists():
        return None
    if _HUB_ID.match(path) and not p.suffix:
        off = hub_offline()
        return f"{off} is set: no hub download" if off else None
    return "no such file" if p.is_absolute() else f"no such file under the working directory {Path.cwd()}"


def _read_json(p: Path) -> list[tuple[int, Any]]:
    raw = p.read_bytes()
    bom = len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0  # as Windows editors save UTF-8
    try:
        text = raw[bom:].decode("utf-8")
    except UnicodeDecodeError as exc:
        at = bom + exc.start
        line = raw.count(b"\n", 0, at) + 1
        raise DataError(f"{p}: row {line}: byte {raw[at]:#04x} at offset {at} is not UTF-8 (JSON "
                        "files are UTF-8: re-encode it, e.g. `iconv -f latin1 -t utf-8`)") from exc
    if p.suffix == ".json" and text.lstrip().startswith("["):
        try:
            return list(enumerate(json.loads(text, object_pairs_hook=_one_value_per_key), 1))
        except json.JSONDecodeError as exc:
            raise DataError(f"{p}: invalid JSON at line {exc.lineno}: {exc.msg}") from exc
        except _RepeatedKey as exc:
            raise DataError(f"{p}: a row gives {exc} twice: which value is meant?") from None
    try:
        return _json_lines(p, text)
    except DataError:
        if p.suffix == ".json" and isinstance(whole := _one_value(text), dict):
            return [(1, whole)]  # one object over many lines: a row, or one_object_error names the file's shape
        raise


def _one_value(text: str) -> Any:
    """The file's text as one JSON value, None where it is not one."""
    try:
        return json.loads(text, object_pairs_hook=_one_value_per_key)
    except (json.JSONDecodeError, _RepeatedKey):
        return None


def _json_lines(p: Path, text: str) -> list[tuple[int, Any]]:
    kind = p.suffix or "file without a suffix"
    hint = "" if p.suffix in (".jsonl", ".json") else \
        f"; a {kind} is read as JSON lines: give .jsonl, .json, .parquet or a saved dataset"
    rows = []
    # lines end at \n, \r\n or \r (which a JSON string cannot hold raw), not where str.splitlines also
    # splits: at U+2028, U+0085..., which JSON strings may hold raw
    for n, line in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), start=1):
        if line.strip():
            try:
                rows.append((n, json.loads(line, object_pairs_hook=_one_value_per_key)))
            except json.JSONDecodeError as exc:
                raise DataError(f"{p}: row {n}: invalid JSON ({exc.msg}){hint}") from exc
            except _RepeatedKey as exc:
                raise DataError(f"{p}: row {n}: {exc} is given twice: which value is meant?") from None
    return rows


class _RepeatedKey(ValueError):
    pass


def _one_value_per_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object that gives a key twice (json keeps the last value in silence) is refused, as YAML's is."""
    row = dict(pairs)
    if len(row) != len(pairs):
        keys = [k for k, _ in pairs]
        raise _RepeatedKey(repr(next(k for k in keys if keys.count(k) > 1)))
    return row


def _load_hf(path: str, *, from_disk: bool) -> list[Any]:
    import datasets

    try:
        ds = datasets.load_from_disk(path) if from_disk else datasets.load_dataset(path, split="train")
    except Exception as exc:  # noqa: BLE001 - any loader failure is a data problem
        raise load_error(f"{path}: cannot load dataset", exc, DataError) from exc
    if isinstance(ds, datasets.DatasetDict):
        if "train" not in ds and len(ds) != 1:
            raise DataError(f"{path}: dataset has splits {sorted(ds)}; point path at one split")
        ds = ds["train"] if "train" in ds else next(iter(ds.values()))
    return ds.to_list()
