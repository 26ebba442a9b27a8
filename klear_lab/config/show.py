"""The tables of ``klear-lab config --keys`` and ``klear-lab components`` (what :mod:`klear_lab.config.describe`
reads from the schema and the components' docstrings, printed with Rich)."""

from __future__ import annotations

from typing import Any


def print_key_table(config: dict[str, Any], prefix: str, experiment: str | None, overrides: list[str]) -> None:
    """Each key at or under ``prefix``: its value in ``config`` and what it means."""
    from rich.markup import escape
    from rich.table import Table

    from klear_lab.config.describe import key_rows
    from klear_lab.console import make_console

    rows = key_rows(config, prefix)
    what = f"values of {experiment}" if experiment else "defaults"
    what += " and overrides" * bool(overrides)
    table = Table(title=f"config keys{f' under {prefix}' if prefix else ''} ({what})", show_lines=True)
    for col in ("key", "value", "description"):
        table.add_column(col)
    for row in rows:
        table.add_row(*map(escape, row))
    make_console().print(table)


def param_lines(cls: type, rows: list[tuple[str, str, object]]) -> list[tuple[str, str]]:
    """(``name: type = default``, its description or '') per parameter of the component class ``cls``."""
    from klear_lab.config.describe import field_docs

    docs = field_docs(cls)
    return [(f"{f}: {t} = {d!r}", docs.get(f, "")) for f, t, d in rows]


def component_table(console, axis: str, keys: list[str], typed: str | None = None) -> None:  # noqa: ANN001 - Console
    """One axis' components: parameters (allowed values where declared, descriptions where documented)
    and the first paragraph of each docstring; the footer's command names the axis as ``typed`` (``filter``,
    ``data.filter``: what names this axis alone), else by its name."""
    import inspect

    from rich.console import Group
    from rich.markup import escape
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    from klear_lab.config.describe import split_doc
    from klear_lab.plugins import plugin_origin
    from klear_lab.registry import REGISTRIES

    reg = REGISTRIES[axis]
    where = f" (config: {', '.join(keys)})" if keys else ""
    table = Table(title=f"{axis} — {reg.doc}{where}", show_lines=True,
                  caption=f"klear-lab components {typed or axis} NAME: a component's whole description")
    for col in ("name", "parameters (defaults)", "description"):
        table.add_column(col)
    for name in reg.names():
        doc, rows = reg.describe(name)
        params = Group(*(part for p, d in param_lines(reg.get(name), rows)  # a description indented under its
                         for part in (Text(p), *([Padding(Text(d, style="dim"), (0, 0, 0, 2))] if d else []))))
        origin = plugin_origin(reg.get(name))
        label = name if origin is None else f"{name}\n(plugin: {origin})"
        summary = " ".join(split_doc(inspect.cleandoc(doc))[0].split("\n\n")[0].split())  # the first paragraph
        table.add_row(escape(label), params, escape(summary))
    console.print(table)


def describe_component(console, axis: str, name: str, keys: list[str]) -> None:  # noqa: ANN001 - a rich Console
    """``klear-lab components AXIS NAME``: the component's whole docstring and its parameters."""
    import inspect

    from rich.markup import escape
    from rich.padding import Padding

    from klear_lab.config.describe import split_doc
    from klear_lab.plugins import plugin_origin
    from klear_lab.registry import REGISTRIES

    reg = REGISTRIES[axis]
    cls = reg.get(name)  # an unknown name: a ConfigError with the registered ones
    doc, rows = reg.describe(name)
    origin = plugin_origin(cls)
    config = f"  (config: {' / '.join(keys)}: {{name: {name}, ...}})" if keys else ""
    console.print(f"[bold]{escape(axis)} {escape(name)}[/bold]{escape(config)}"
                  + (f"  [dim](plugin: {escape(origin)})[/dim]" if origin else ""))
    console.print(escape(split_doc(inspect.cleandoc(doc))[0]) or "(no description)", highlight=False)
    console.print("\n[bold]parameters[/bold]" if rows else "\n(no parameters)")
    for line, described in param_lines(cls, rows):
        console.print(Padding(escape(line), (0, 0, 0, 2), expand=False), highlight=False)
        if described:
            console.print(Padding(escape(described), (0, 0, 0, 6), expand=False), highlight=False)
