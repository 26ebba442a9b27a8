"""Real data from a file, a saved ``datasets`` directory or a hub id, mapped onto ``Record``."""

from __future__ import annotations

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
    has_column,
    one_object_error,
    type_hint,
)
from klear_lab.data.sources.file_read import read_rows, unavailable
from klear_lab.data.sources.file_rows import dropped_turns, other_tasks, to_record
from klear_lab.errors import DataError
from klear_lab.registry import SOURCE

FORMATS = ("auto", "verl", "messages", "records")
TASKS = ("auto", "math", "code")
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
    a ``datasets.save_to_disk`` directory (of a ``DatasetDict``: its ``train`` split, and for ``data.eval_sources``
    its ``test``, else ``validation`` split), or (``HF_HUB_OFFLINE`` unset) a hub id, its ``train`` split.
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
        if not (path or "").strip():
            field_name = self.path_field(split)  # "data file" below: the caller names the config key
            raise DataError(f"data file {path or ''!r}: no path set for the {split} split: give {field_name} "
                            f"({PATH_FORMS})")
        every_row = read_rows(path, split)
        rows = every_row[: self.limit]
        fmt = self.format if self.format != "auto" else detect_format(rows, self.fields)
        columns = {**COLUMNS[fmt], **self.fields}
        if fmt == "records" and "task" not in self.fields and _only_ability(rows):
            columns["task"] = "ability"  # as verl names it: the README's `task`/`ability`
        label = self.label or Path(path).stem or path
        try:
            if split == "train":  # a node read for both splits maps training columns its held-out file lacks;
                check_mapped_columns(path, every_row, self.fields)  # rows past `limit` too: the name is not wrong
            records = [to_record(row, i, fmt, columns, path, label, self.task, scored=split == "eval")
                       for i, row in rows]
        except DataError as exc:
            raise one_object_error(path, every_row, exc) from None  # the whole file's: `limit: 1` cuts no wrapper
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
        if not path.strip():
            return field_name, f"{path!r}: no path set: give {field_name} ({PATH_FORMS})"
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


def detect_format(rows: list[tuple[int, Any]], fields: dict[str, str] | None = None) -> str:
    """The layout of ``rows`` by their first row: ``messages`` if it has the chat column (``messages``, or the
    one ``fields`` maps ``messages`` to: ``{messages: conversations}``), ``verl`` if it has ``reward_model``,
    else ``records``."""
    first = rows[0][1] if rows and isinstance(rows[0][1], dict) else {}
    chat = (fields or {}).get("messages", "messages").split(".")
    return "messages" if has_column(first, chat) else "verl" if "reward_model" in first else "records"


def _only_ability(rows: list[tuple[int, Any]]) -> bool:
    """Whether records-layout rows name their task in an ``ability`` column (verl's name) and none in ``task``."""
    objects = [row for _, row in rows if isinstance(row, dict)]
    return any("ability" in row for row in objects) and not any("task" in row for row in objects)
