"""Checks of the pools of records a run's data sources gave (registers nothing): sources that gave none, held-out
sources that name their records alike, a file listed twice, training files whose records share a name, and an
``eval_path`` no held-out source reads. Each names the config key and file of the sources it is about."""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import Any

from klear_lab.data.records import Record
from klear_lab.errors import DataError


def source_path(node: dict[str, Any], split: str) -> str | None:
    """The file a source node reads for ``split``: its ``eval_path`` for the eval split when set, else its
    ``path`` (None for a source without one: the generated world)."""
    path = node.get("eval_path") if split == "eval" and node.get("eval_path") else node.get("path")
    return None if path is None else str(path)


def check_some_records(pools: dict[str, list[Record] | None], where: dict[str, str], split: str,
                       nodes: list[dict[str, Any]]) -> None:
    """Refuse sources that gave no records: all of them (``data.eval_sources`` only where it lists some), or
    some beside others that did (an empty file). None: not read, taken as some records."""
    gave_none = [label for label, recs in pools.items() if recs is not None and not recs]
    if len(gave_none) == len(pools) and (pools or split == "train"):
        files = [f for n in nodes if (f := source_path(n, split))]
        read_files = f"; read {', '.join(files)}" if files else ""
        if split == "train":
            counts = f"({', '.join(f'{n}: 0' for n in pools)})" if pools else "(it lists no source)"
            raise DataError(f"data.sources produced no training records {counts}{read_files}")
        raise DataError("data.eval_sources gave no eval records" + read_files)
    if gave_none:
        raise DataError(f"{', '.join(where[label] for label in gave_none)}: no {split} records (an empty "
                        "file?) while the other sources have some; remove the source or fill it")


def check_distinct_sources(pools: dict[str, list[Record]], where: dict[str, str], unlabelled: set[str]) -> None:
    """Held-out sources whose records share a name merge into one ``val/<source>/acc`` (and row n of each
    file, one uid, draws one sampling seed). A file's records are named by its rows' ``source`` /
    ``data_source``, else its file name, so ``aime24/test.jsonl`` and ``aime25/test.jsonl`` both name
    theirs ``test``: refused unless both were labelled alike on purpose. The embedded world's sources
    (no label) may repeat, as before (two ``arith`` sources of other levels: one ``val/arith/acc``)."""
    if shared := shared_record_name(pools, unlabelled):
        first, label, name = shared
        raise DataError(f"{where[first]} and {where[label]} both name their records {name!r}: one "
                        f"val/{name}/acc would score both; give each file source its own label "
                        f"({_label_hint(where[first], where[label])})")


def _label_hint(*places: str) -> str:
    """``label: aime24`` on ``data.eval_sources.0``, ``label: aime25`` on ``...1``: each file's folder name, where
    those differ (``aime24/test.jsonl``, ``aime25/test.jsonl``), else one example."""
    found = [re.fullmatch(r"(\S+) \((.+)\)", place) for place in places]
    folders = [Path(m.group(2)).parent.name if m else "" for m in found]
    if all(folders) and len(set(folders)) == len(folders):
        return ", ".join(f"`label: {folder}` on {m.group(1)}" for folder, m in zip(folders, found))
    return "`label: aime24`, say"


def shared_record_name(pools: dict[str, list[Record] | None], unlabelled: set[str]) -> tuple[str, str, str] | None:
    """(first pool, later pool, name) of the first record name two pools give their records where one of the two
    is an unlabelled file source's (the same label on both says they are one source), else None."""
    owner: dict[str, str] = {}  # record source -> the first pool naming its records so
    for label, recs in pools.items():
        for name in dict.fromkeys(r.source for r in recs or ()):
            first = owner.setdefault(name, label)
            if first != label and (first in unlabelled or label in unlabelled):
                return first, label, name
    return None


def warn_repeated_files(nodes: list[dict[str, Any]], labels: list[str]) -> None:
    """Warn when two ``data.sources`` entries read one file (``labels``: their pools, in order): its records are
    then drawn as two sources' (twice as many with the ``all`` mix). Not where both have a label: said on purpose."""
    first: dict[str, int] = {}
    for i, node in enumerate(nodes):
        if not (path := source_path(node, "train")):
            continue
        j = first.setdefault(file_key(path), i)
        if j != i and not (nodes[j].get("label") and node.get("label")):
            warnings.warn(f"data.sources.{i} reads the same file as data.sources.{j} ({path}): its records are drawn "
                          f"as two sources' ({labels[j]!r} and {labels[i]!r}); list it once, or give each entry its "
                          "own `label:` if that is meant", UserWarning, stacklevel=3)


def warn_shared_record_names(pools: dict[str, list[Record] | None], where: dict[str, str],
                             unlabelled: set[str]) -> None:
    """Warn when unlabelled training files name their records alike (``a/train.jsonl``, ``b/train.jsonl``: both
    ``train``): ``data/mix_share/train`` and the per-source metrics then count the two as one source."""
    if shared := shared_record_name(pools, unlabelled):
        first, label, name = shared
        warnings.warn(f"{where[first]} and {where[label]} both name their records {name!r}, so "
                      f"data/mix_share/{name} counts them as one source; give each file source its own "
                      "`label:` to tell them apart", UserWarning, stacklevel=3)


def warn_unread_eval_paths(cfg: dict[str, Any], nodes: list[dict[str, Any]]) -> None:
    """Warn when a ``data.sources`` entry sets an ``eval_path`` that no ``data.eval_sources`` entry reads: only
    an eval source reads one (the held-out records are ``data.eval_sources``'), so the run would evaluate on
    other problems than the user meant, without a word."""
    heldout = {file_key(p) for n in cfg["data"].get("eval_sources") or [] if (p := source_path(n, "eval"))}
    for i, node in enumerate(nodes):
        path = node.get("eval_path")
        if path and file_key(str(path)) not in heldout:
            entry = f"{{name: file, path: {node.get('path')}, eval_path: {path}}}"
            warnings.warn(f"data.sources.{i} sets eval_path: {path}, which no data.eval_sources entry reads, so the "
                          f"run does not evaluate on it (a training source's eval_path is not read); add `{entry}` "
                          "to data.eval_sources", UserWarning, stacklevel=3)


def file_key(path: str) -> str:
    """``path`` as two entries naming one file compare (``data/x.jsonl``, ``./data/x.jsonl``)."""
    return os.path.normpath(os.path.expanduser(path))
