"""``klear-lab config A --diff B``: what differs between two resolved configs (experiment files, saved
``config.yaml`` files or run directories), key by key, and which of those differences make them different
runs (the config hash) rather than the same run under another name, seed or W&B project; and, of two runs,
whether they read different records (``run.json``'s data digests: the config names files, not contents)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from klear_lab.config.flat import changed_keys, cut_pair, flatten, value_text
from klear_lab.errors import ConfigError


def resolved(target: str, overrides: list[str] | None = None) -> dict[str, Any]:
    """The config ``target`` names as its run records it: an experiment YAML composed as ``train`` would (a
    ``model.init_from`` resolved to its starting point's newest completed run, as the run does when it starts),
    a saved ``config.yaml``, or a run directory (its ``config.yaml``). The ``.py`` plugins it imports are
    forgotten again, so that two versions of one plugin (a run's kept copy, the file edited since) can be
    compared in one process."""
    from klear_lab.config.compose import compose
    from klear_lab.starting_point import with_start_looked_up

    path = Path(target)
    if path.is_dir():
        if not (path / "config.yaml").is_file():
            sweep = " (a sweep's: give one of its trials, under runs/)" if (path / "spec.yaml").is_file() else ""
            raise ConfigError(f"{target}: a directory without config.yaml{sweep}; give an experiment YAML, a "
                              "config.yaml or a run directory")
        path = path / "config.yaml"
    with _file_plugins_forgotten():  # the starting point's plugins too: its experiment is composed here
        return _with_sweep_start(with_start_looked_up(compose(path, overrides or []), read_data=False))


def _with_sweep_start(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` whose starting point has no completed run in its own ``runs/`` but one a sweep trained: the run
    starts from a hard-linked copy of that one in its ``runs/`` (``start_sharing.share_sweep_start``) and
    records the copy's path, given here as it will be (``train --dry-run`` names the same run)."""
    from klear_lab.start_sharing import sweep_start
    from klear_lab.starting_point import parent_config
    from klear_lab.tracking import config_hash, out_dir_of

    m = cfg["model"]
    if m["init_from"] and not m["name_or_path"]:
        parent = parent_config(cfg, read_data=False)
        if (swept := sweep_start(parent, config_hash(parent))) is not None:
            m["name_or_path"] = str(out_dir_of(parent).resolve() / swept.name)
    return cfg


def same_run_elsewhere(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """A note when the two start from one run under two paths (a sweep's, and the copy of it a run outside
    the sweep links into its own ``runs/``): the path is hashed, so they are different arms all the same."""
    path_a, path_b = (Path(str(c["model"]["name_or_path"] or "")) for c in (a, b))
    if path_a == path_b or not path_a.name or path_a.name != path_b.name or not (a["model"]["init_from"] or
                                                                                 b["model"]["init_from"]):
        return None
    return (f"model.name_or_path: both start from a run named {path_a.name}, under two paths (a sweep's run, and "
            "the copy of it a run outside that sweep links into its own runs/, say); the path is part of the "
            "config hash, so they are different arms all the same")


@contextlib.contextmanager
def _file_plugins_forgotten() -> Iterator[None]:
    """Undo what ``.py`` plugin files imported within registered (their modules too); built-ins and
    installed plugin packages stay, as a fresh process would import them again alike."""
    from klear_lab.plugins import FILE_MODULE_PREFIX
    from klear_lab.registry import REGISTRIES

    for registry in REGISTRIES.values():
        registry.load_builtins()
    before = {axis: registry.snapshot() for axis, registry in REGISTRIES.items()}
    modules = set(sys.modules)
    try:
        yield
    finally:
        for axis, registry in REGISTRIES.items():
            registry.restore({name: entry for name, entry in registry.snapshot().items()
                              if name in before[axis] or not _from_file(entry, FILE_MODULE_PREFIX)})
        for name in [m for m in set(sys.modules) - modules if m.startswith(FILE_MODULE_PREFIX)]:
            del sys.modules[name]


def _from_file(entry: Any, prefix: str) -> bool:
    return str(getattr(getattr(entry, "component_function", entry), "__module__", "")).startswith(prefix)


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    """(dotted key, A's value, B's value, whether it changes the config hash) per key whose values differ,
    in key order, values as JSON (a long one cut for the table: compared whole). Lists of mappings
    (``data.sources``) are compared item by item; plugins' paths as changing the hash only where their code differs."""
    from klear_lab.tracking import hashed_body

    flat_a, flat_b = flatten(a), flatten(b)
    hashed_a, hashed_b = flatten(hashed_body(a)), flatten(hashed_body(b))
    return [(key, *cut_pair(text_a, text_b), value_text(hashed_a, key) != value_text(hashed_b, key))
            for key, text_a, text_b in changed_keys(flat_a, flat_b)]


def recorded_data(target: str) -> dict[str, str] | None:
    """The ``data`` digests ``run.json`` keeps when ``target`` is a run directory or its ``config.yaml``; None
    for an experiment file (its records would have to be read: the whole corpus) or a run without them."""
    import json

    path = Path(target)
    record = path / "run.json" if path.is_dir() else path.parent / "run.json"
    if not (path.is_dir() or path.name == "config.yaml") or not record.is_file():
        return None
    try:
        data = json.loads(record.read_text()).get("data")
    except (OSError, ValueError, AttributeError):
        return None  # a damaged record: the config comparison is still worth showing
    return data if isinstance(data, dict) else None


def records_differences(a: dict[str, str] | None, b: dict[str, str] | None, same_seed: bool = True) -> list[str]:
    """``data.train A vs B`` per split whose recorded digests differ between two runs (none when either is not
    a run): the config names data files, not their contents, so two runs of one config may have read other
    records (a data file edited between them, or read from another directory). The training records of two
    seeds differ anyway (the data mix draws and shuffles by ``run.seed``): compared only at one seed."""
    if not a or not b:
        return []
    return [f"data.{split} {a[split]} vs {b[split]}" for split in a
            if split in b and a[split] != b[split] and (same_seed or split != "train")]


def print_differences(a_label: str, b_label: str, a: dict[str, Any], b: dict[str, Any],
                      records: list[str] | None = None) -> None:
    """The table of :func:`differences`, headed by both configs' hashes and seeds; ``records``, what
    :func:`records_differences` found (two runs that read other records), after it."""
    from rich.markup import escape
    from rich.table import Table

    from klear_lab.console import make_console
    from klear_lab.tracking import config_hash

    rows = differences(a, b)
    console = make_console()
    for name, label, cfg in (("A", a_label, a), ("B", b_label, b)):
        console.print(escape(f"{name}: {label} (config hash {config_hash(cfg)}, seed {cfg['run']['seed']})"))
    read = f"they read different records (run.json's data digests): {'; '.join(records)}" if records else ""
    if not rows:
        console.print(escape(f"the same config, but {read}") if read else "no differences: the same config")
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
    if note := same_run_elsewhere(a, b):
        console.print(escape(f"note: {note}"))
    if read:
        console.print(escape(f"and {read}"))
