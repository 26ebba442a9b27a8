"""``klear-lab config A --diff B``: what differs between two resolved configs (experiment files, saved
``config.yaml`` files or run directories), key by key, and which of those differences make them different
runs (the config hash) rather than the same run under another name, seed or W&B project."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from klear_lab.config.flat import cut, flatten, value_text
from klear_lab.errors import ConfigError


def resolved(target: str, overrides: list[str] | None = None) -> dict[str, Any]:
    """The config ``target`` names, composed as ``train`` would: an experiment YAML, a saved ``config.yaml``,
    or a run directory (its ``config.yaml``)."""
    from klear_lab.config.compose import compose

    path = Path(target)
    if path.is_dir():
        if not (path / "config.yaml").is_file():
            raise ConfigError(f"{target}: a directory without config.yaml; give an experiment YAML, a config.yaml "
                              "or a run directory")
        path = path / "config.yaml"
    return compose(path, overrides or [])


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    """(dotted key, A's value, B's value, whether it changes the config hash) per key whose values differ,
    in key order, values as JSON (a long one cut for the table: compared whole). Lists of mappings
    (``data.sources``) are compared item by item; plugins' paths as changing the hash only where their code differs."""
    from klear_lab.tracking import hashed_body

    flat_a, flat_b = flatten(a), flatten(b)
    hashed_a, hashed_b = flatten(hashed_body(a)), flatten(hashed_body(b))
    rows = []
    for key in sorted(flat_a.keys() | flat_b.keys()):
        text_a, text_b = value_text(flat_a, key), value_text(flat_b, key)
        if text_a != text_b:
            rows.append((key, cut(text_a), cut(text_b), value_text(hashed_a, key) != value_text(hashed_b, key)))
    return rows


def print_differences(a_label: str, b_label: str, a: dict[str, Any], b: dict[str, Any]) -> None:
    """The table of :func:`differences`, headed by both configs' hashes and seeds."""
    from rich.markup import escape
    from rich.table import Table

    from klear_lab.console import make_console
    from klear_lab.tracking import config_hash

    rows = differences(a, b)
    console = make_console()
    for name, label, cfg in (("A", a_label, a), ("B", b_label, b)):
        console.print(escape(f"{name}: {label} (config hash {config_hash(cfg)}, seed {cfg['run']['seed']})"))
    if not rows:
        console.print("no differences: the same config")
        return
    hashed = sum(h for *_, h in rows)
    same = f"{hashed} of them change the config hash" if hashed else "none changes the config hash: the same arm"
    console.print(f"{len(rows)} key(s) differ ({same}):")  # not the title: Rich wraps a title to the table
    table = Table()
    for col in ("key", "A", "B", "hashed"):
        table.add_column(col)
    for key, value_a, value_b, in_hash in rows:
        table.add_row(escape(key), escape(value_a), escape(value_b), "yes" if in_hash else "no")
    console.print(table)
