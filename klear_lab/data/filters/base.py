"""The output check of any difficulty filter (a plugin's too); registers nothing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from klear_lab.data.records import Record
from klear_lab.errors import component_error


def filtered_records(flt: Any, records: list[Record], source: str) -> list[Record]:
    """``flt(records)``, checked: a difficulty filter returns the records it keeps. A plugin's that returned a
    count made the data stats fail with ``TypeError: object of type 'int' has no len()`` and no name."""
    out = flt(records)
    if isinstance(out, (str, bytes)) or not isinstance(out, Sequence):
        raise component_error("data.filter", flt, f"returned {type(out).__name__} ({repr(out)[:60]}) on source "
                              f"{source!r}; a difficulty filter returns the list of Records it keeps")
    wrong = next((r for r in out if not isinstance(r, Record)), None)
    if wrong is not None:
        raise component_error("data.filter", flt, f"returned a {type(wrong).__name__} ({repr(wrong)[:60]}) among "
                              f"its records on source {source!r}; a difficulty filter returns the list of Records "
                              "it keeps")
    return list(out)
