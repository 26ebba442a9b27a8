"""Checks of a ``file`` source's parameters and of how its rows meet them (registers nothing).

Mistakes a user bringing their own data makes (an empty ``path=``, ``{prompt:question}`` without its space,
a ``fields`` column the file does not have, one JSON object instead of rows) are named here with what to
write instead, rather than surfacing as a type error or as rows silently read with a default.
"""

from __future__ import annotations

import codecs
import re
from pathlib import Path
from typing import Any

from klear_lab.data.sources.base import check_quality_rank
from klear_lab.errors import DataError

PATH_FORMS = "a .jsonl/.json/.parquet file, a datasets.save_to_disk directory or a hub id"
_SHOWN_COLUMNS = 20  # a wide file's column list is cut to this many names


def check_params(src: Any) -> None:
    """``path`` and ``fields`` values a config check lets through only from Python (``FileSource(path=None)``),
    and a ``quality_rank`` below 1.

    Raises:
        ValueError: naming the key, what was given and what to write.
    """
    if src.path is None:
        raise ValueError(_NULL_PATH)
    check_quality_rank(src)
    if not isinstance(src.fields, dict):  # `FileSource(fields="prompt:q")`: was an AttributeError on `.items`
        pairs = re.findall(r"([\w.]+)\s*:\s*([^,\s}]+)", str(src.fields))
        example = dict(pairs) if pairs else {"prompt": "question"}
        raise ValueError(f"fields: expected a mapping of record keys to columns, got {src.fields!r}; e.g. "
                         f"fields={example!r}")
    for key, column in src.fields.items():
        if column is None or not str(column).strip():
            raise ValueError(_no_column(key, column))


def type_hint(key: str, value: Any) -> str | None:
    """What a ``path`` or ``fields`` of the wrong type usually means, for the config check's type error:
    ``path=`` (null) given empty; ``{prompt:question}`` (one key holding null) or, on a line of its own under
    ``fields:``, ``prompt:question`` (one text) written without the space YAML needs after the colon."""
    if key == "path" and value is None:
        return _NULL_PATH
    if key != "fields":
        return None
    if isinstance(value, str) and ":" in value:
        return f"YAML read `{value}` as one text{_written_as(value)}"
    if isinstance(value, dict):
        empty = next((k for k, column in value.items() if column is None), None)
        return None if empty is None else _no_column(str(empty), None)
    return None


_NULL_PATH = f"path is empty (null): give the data, e.g. path=data/train.jsonl ({PATH_FORMS})"


def _no_column(key: str, column: Any) -> str:
    if ":" not in key:
        return f"fields: {key!r} maps to no column ({column!r}); give the column it reads, or leave it out"
    return f"fields: {key!r} maps to no column ({column!r}); YAML read `{key}` as one key{_written_as(key)}"


def _written_as(text: str) -> str:
    """How to write ``field:column`` (YAML needs a space after the colon of a mapping); several such lines
    under ``fields:`` are read as one text, ``prompt:q answer:a``."""
    pairs = [part.partition(":") for part in text.split()]
    if len(pairs) < 2 or not all(colon for _, colon, _ in pairs):
        pairs = [text.partition(":")]
    mapping = ", ".join(f"{field.strip()}: {column.strip()}" for field, _, column in pairs)
    return f": write `{{{mapping}}}`, with a space after each colon"


def check_mapped_columns(path: str, rows: list[tuple[int, Any]], fields: dict[str, str]) -> None:
    """A column the user mapped in ``fields`` that no row has is a misspelling: read as absent, an optional
    field would silently take its default on every row (``{difficulty: level}`` on a file without ``level``:
    every row level 1). A column some rows have keeps the per-row handling (absent there).

    Raises:
        DataError: naming the file, the mapping, and the columns the rows do have.
    """
    objects = [row for _, row in rows if isinstance(row, dict)]
    if not objects:  # an empty file, or rows that are not objects: refused elsewhere, with their row
        return
    for key, column in fields.items():
        if not any(has_column(row, column.split(".")) for row in objects):
            raise DataError(f"{path}: fields: {{{key}: {column}}}: no row (of {len(objects)} read) has a column "
                            f"{column!r}; {_columns_near(objects, column)}; fix the column's name in fields, or "
                            f"leave {key!r} out of fields")


def has_column(row: Any, keys: list[str]) -> bool:
    """Whether ``row`` holds the dotted column ``keys`` (``['reward_model', 'ground_truth']``)."""
    for key in keys:
        if not isinstance(row, dict) or key not in row:
            return False
        row = row[key]
    return True


def _columns_near(rows: list[dict[str, Any]], column: str) -> str:
    """The columns the rows have where ``column`` was looked for: the top level, or inside its deepest
    dotted prefix that some row has (``reward_model`` for ``reward_model.answer``)."""
    keys = column.split(".")
    depth = max((d for d in range(len(keys)) if any(has_column(r, keys[:d]) for r in rows)), default=0)
    names: dict[str, None] = {}
    for row in rows:
        value = _get_at(row, keys[:depth])
        if isinstance(value, dict):
            names.update(dict.fromkeys(map(str, value)))
    where = "the rows' columns" if depth == 0 else f"the rows' {'.'.join(keys[:depth])!r} holds"
    shown = sorted(names)[:_SHOWN_COLUMNS]
    more = f", ... ({len(names) - len(shown)} more)" if len(names) > len(shown) else ""
    return f"{where}: {', '.join(shown) or 'none'}{more}"


def _get_at(row: Any, keys: list[str]) -> Any:
    for key in keys:
        row = row.get(key) if isinstance(row, dict) else None
    return row


def one_object_error(path: str, rows: list[tuple[int, Any]], exc: DataError) -> DataError:
    """``exc`` (a row refused), saying so when the file (``rows``: all of its rows) is a ``.json`` holding one
    object rather than rows: read as JSON lines, that object was taken for the only row (``{"data": [...]}``,
    pandas' column-wise ``to_json``), and the row error alone does not say the file's shape is at fault. The
    same for a ``.jsonl`` whose only row wraps the rows in a list (``{"data": [{...}, ...]}`` on one line)."""
    obj = rows[0][1] if len(rows) == 1 else None
    inner = next((k for k, v in obj.items() if _rows_like(v)), None) if isinstance(obj, dict) else None
    if inner and Path(path).suffix.lower() == ".jsonl":
        return DataError(f"{path}: the file's one row wraps the rows: its {inner!r} holds {len(obj[inner])} "
                         "objects; a .jsonl file holds one row object per line: write each of them on a line of "
                         f"its own (or save the list as a .json file). Read as one row, it fails: {exc}")
    if not _is_one_json_object(path, rows):
        return exc
    keys = ", ".join(repr(k) for k in list(obj)[:_SHOWN_COLUMNS])
    nested = f"; its {inner!r} holds {len(obj[inner])} objects: save that list as the file" if inner else ""
    return DataError(f"{path}: the file is one JSON object (keys {keys}), not rows: a .json file holds an array "
                     f"of row objects [{{...}}, {{...}}], a .jsonl file one row object per line{nested}. Read as "
                     f"one row, it fails: {exc}")


def _rows_like(value: Any) -> bool:
    """A non-empty list of objects that are not chat turns (a messages row's ``messages``, a verl row's ``prompt``
    hold turns, ``{"role": ..., "content": ...}``): the rows a wrapper object holds."""
    return (isinstance(value, list) and bool(value) and all(isinstance(x, dict) for x in value)
            and not all("role" in x for x in value))


def _is_one_json_object(path: str, rows: list[tuple[int, Any]]) -> bool:
    p = Path(path).expanduser()
    if len(rows) != 1 or not isinstance(rows[0][1], dict) or p.suffix.lower() != ".json" or not p.is_file():
        return False
    head = p.read_bytes()[:4096].removeprefix(codecs.BOM_UTF8).lstrip()
    return head.startswith(b"{")
