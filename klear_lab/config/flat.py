"""A nested config as dotted keys, and its values as the tables and refusals that name them show them."""

from __future__ import annotations

import json
from typing import Any

UNSET = "(unset)"


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted keys of a nested config: mappings by key, lists of mappings or lists by index, other values
    (a plugin list of code digests included) whole; empty mappings and lists leave no key."""
    items = node.items() if isinstance(node, dict) else enumerate(node) \
        if isinstance(node, list) and any(isinstance(v, (dict, list)) for v in node) else None
    if items is None:
        return {} if node == [] else {prefix[:-1]: node}
    out: dict[str, Any] = {}
    for key, value in items:
        out.update(flatten(value, f"{prefix}{key}."))
    return out


def value_text(flat: dict[str, Any], key: str) -> str:
    """``flat[key]`` as JSON (NaN equal to itself, so comparable as text), or :data:`UNSET`."""
    return json.dumps(flat[key], default=str, sort_keys=True) if key in flat else UNSET


def cut(text: str, chars: int = 60) -> str:
    """``text`` cut to ``chars`` characters with "..." (for showing only: compare the whole text)."""
    return text if len(text) <= chars else text[:chars - 3] + "..."
