"""A nested config as dotted keys, and its values as the tables and refusals that name them show them."""

from __future__ import annotations

import json
from typing import Any

UNSET = "(unset)"


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted keys of a nested config: mappings by key, lists of mappings or lists by index, other values
    (a plugin list of code digests included) whole; an empty mapping or list is a value (``plugins: []``), so
    that a change from or to it reads ``[]``, not ``(unset)``."""
    items = node.items() if isinstance(node, dict) else enumerate(node) \
        if isinstance(node, list) and any(isinstance(v, (dict, list)) for v in node) else None
    if items is None or node in ({}, []):
        return {prefix[:-1]: node} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in items:
        out.update(flatten(value, f"{prefix}{key}."))
    return out


def value_text(flat: dict[str, Any], key: str) -> str:
    """``flat[key]`` as JSON (NaN equal to itself, so comparable as text), or :data:`UNSET`."""
    return json.dumps(flat[key], default=str, sort_keys=True) if key in flat else UNSET


def changed_keys(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(key, A's text, B's text) of each key two :func:`flatten`-ed configs hold differently, in key order,
    compared whole (cut them for showing with :func:`cut_pair`)."""
    texts = ((key, value_text(a, key), value_text(b, key)) for key in sorted(a.keys() | b.keys()))
    changed = [(key, text_a, text_b) for key, text_a, text_b in texts if text_a != text_b]
    below = {key.rsplit(".", 1)[0] for key, _, _ in changed if "." in key}  # keys with a changed key under them
    return [row for row in changed if not _emptied_parent(row, below)]


def _emptied_parent(row: tuple[str, str, str], below: set[str]) -> bool:
    """An empty mapping or list on one side, unset on the other, whose filled side's keys are listed
    (``fields: {} -> (unset)`` beside ``fields.prompt: (unset) -> "q"``): the keys under it say it."""
    key, a, b = row
    return UNSET in (a, b) and {a, b} - {UNSET} <= {"{}", "[]"} and any(
        k == key or k.startswith(key + ".") for k in below)


def cut_pair(a: str, b: str, chars: int = 60) -> tuple[str, str]:
    """Two different values cut to ``chars`` characters each so that where they differ shows: from a little
    before their first differing character (two paths ending ``_v1.parquet`` and ``_v2.parquet``, two run
    directories differing in their hash) rather than both cut to the same start."""
    if len(a) <= chars and len(b) <= chars:
        return a, b
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    start = 0 if first < chars - 10 else first - 20
    return _window(a, start, chars), _window(b, start, chars)


def _window(text: str, start: int, chars: int) -> str:
    head = "..." if start > 0 else ""
    room = chars - len(head)
    body = text[start:]
    return head + (body if len(body) <= room else body[:room - 3] + "...")
