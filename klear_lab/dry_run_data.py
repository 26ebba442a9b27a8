"""The dry run's rows about data, from what the config declares: no data row is read or generated.

Generated sources declare their records (``n_prompts`` x ``responses_per_prompt`` to train on, ``n_prompts``
held out; ``arith_facts``: ``n_records``, none held out), a file source at most its ``limit`` rows, a
budgeted mix exactly its ``budget``. Filters, decontamination and ``data.max_length`` only remove examples.

SFT steps: the stage packs whole examples into rows of ``data.max_length`` tokens (best-fit decreasing,
``data.sft.pack_bfd``), never splitting one, so a row holds at least one example: one example per row is the
most steps the declared examples can give, and exactly what packing gives when every example is longer than
half a row (or ``data.pack`` is off). How many shorter ones share a row depends on their token lengths,
which only the run knows (a tiny model's tokenizer is trained on the records at its start), so the row says
what two or three per row would give. Steps round as ``stages.sft.sft_plan`` rounds them: up.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from klear_lab.distributed import device_count
from klear_lab.stages.sft_steps import planned_sft_steps, rows_per_micro_batch

PER_ROW_EXAMPLES = (2, 3)  # the packings the steps row names beside one example per row
DATA_NOT_READ = ("data rows", "not read or checked by a dry run (it checks what the config decides without them: "
                 "a training run's data mix against its sources' labels and quality ranks, the held-out sources' "
                 "labels and files): the run checks them as it starts, before its run directory "
                 "exists (a sweep's: `klear-lab sweep SPEC --validate-only`)")


def declared_records(node: dict[str, Any], split: str) -> tuple[int, bool] | None:
    """``(count, exact)``: the records a source node declares for ``split`` (``train`` or ``eval``); a file's
    ``limit`` is an upper bound (the file may hold fewer). None: the node declares no count."""
    if node.get("limit"):
        return int(node["limit"]), False
    if node.get("n_prompts"):
        per_prompt = node.get("responses_per_prompt", 1) if split == "train" else 1
        return int(node["n_prompts"]) * int(per_prompt), True
    if "n_records" in node:  # arith_facts: a training drill, no held-out split
        return (int(node["n_records"]) if split == "train" else 0), True
    return None


def undeclared(nodes: list[dict[str, Any]], section: str, split: str) -> list[str]:
    """``data.SECTION.I (what)`` of each node that declares no record count: its file, else its name."""
    from klear_lab.builders import source_path

    return [f"data.{section}.{i} ({source_path(node, split) or node.get('name')})" for i, node in enumerate(nodes)
            if declared_records(node, split) is None]


def estimated_examples(cfg: dict[str, Any]) -> int | None:
    """The training examples the config declares, before any is filtered or dropped (None: a source does
    not say how many it gives)."""
    mix = cfg["data"]["mix"]
    if mix.get("budget"):  # met exactly, by repeating records where the sources hold fewer (top_k of all: k 0 too)
        return int(mix["budget"])
    counts = [declared_records(node, "train") for node in cfg["data"]["sources"]]
    if any(c is None for c in counts):
        return None
    return sum(n for n, _ in counts)


def planned_steps(cfg: dict[str, Any], rows: int) -> int:
    """The optimizer steps ``stages.sft.sft_plan`` plans for ``rows`` packed rows: every device's share of
    the rows, in micro-batches, in accumulation windows (a short last one steps too), times ``sft.epochs``
    rounded up (a fraction of an epoch that starts a step trains it)."""
    s = cfg["sft"]
    devices = device_count(cfg["trainer"])
    return planned_sft_steps(rows, rows_per_micro_batch(cfg), s["grad_accum"], devices, s["epochs"], s["max_steps"])[1]


def sft_steps_rows(cfg: dict[str, Any]) -> list[tuple[str, str]]:
    """The examples, epochs and optimizer-step rows of an SFT plan."""
    s = cfg["sft"]
    if s["max_steps"] > 0:
        return [("optimizer steps", f"{s['max_steps']:,} (sft.max_steps)")]
    n = estimated_examples(cfg)
    if not n:
        missing = ", ".join(undeclared(cfg["data"]["sources"], "sources", "train"))
        return [("epochs", str(s["epochs"])),
                ("optimizer steps", f"counted when the run reads the data: {missing} declares no count (a "
                                    "file source's `limit` would)")]
    return [("examples (declared, before data.filter)", f"{n:,}"), ("epochs", str(s["epochs"])),
            ("optimizer steps (est.: data rows not read)", steps_text(cfg, n))]


def steps_text(cfg: dict[str, Any], n: int) -> str:
    """At most one example per row's steps, and, where packing may put several in a row, what 2 or 3 give."""
    most = planned_steps(cfg, n)
    if not cfg["data"]["pack"]:
        return f"at most {most:,} (one example per row: data.pack off; fewer if examples are dropped)"
    half = cfg["data"]["max_length"] // 2
    text = f"at most {most:,} (one example per row, as packing gives examples over {half:,} tokens: half a row)"
    fewer = {k: planned_steps(cfg, math.ceil(n / k)) for k in PER_ROW_EXAMPLES}
    if fewer[PER_ROW_EXAMPLES[0]] == most:  # one step whatever the packing
        return text
    if fewer[PER_ROW_EXAMPLES[0]] == 1:
        return f"{text}; 1 at 2 or more per row"
    return f"{text}; at {' / '.join(map(str, fewer))} per row: {' / '.join(f'{s:,}' for s in fewer.values())}"


def sft_warmup_problem(cfg: dict[str, Any]) -> str | None:
    """An ``sft.epochs`` run whose warmup outlasts even the most steps the declared examples can give
    (``builders.warmup_problem`` says it of a known step count)."""
    o, n = cfg["optim"], estimated_examples(cfg)
    if cfg["sft"]["max_steps"] > 0 or not n or o["warmup_steps"] < (most := planned_steps(cfg, n)):
        return None
    steps = f"{most:,} step" + "s" * (most != 1)
    return (f"optim.warmup_steps={o['warmup_steps']} is not below the run's at most {steps}: the learning rate "
            f"reaches optim.lr={o['lr']:g} at the last step at best, and no {o['schedule']} phase runs")


def _shown_name(node: dict[str, Any]) -> str:
    """A held-out source as the plan names it: its label, else a file's name (the run's default label), else
    the source's."""
    path = node.get("eval_path") or node.get("path")
    return node.get("label") or (Path(str(path)).stem if node.get("name") == "file" and path else node.get("name"))


def heldout_row(cfg: dict[str, Any]) -> tuple[str, str]:
    """How many held-out problems the evaluation scores, as ``data.eval_sources`` declare them."""
    nodes = cfg["data"].get("eval_sources") or []
    if not nodes:
        return "held-out problems", "none (data.eval_sources is empty)"
    if missing := undeclared(nodes, "eval_sources", "eval"):
        return "held-out problems", f"counted when the run reads them: {', '.join(missing)} declares no count"
    counts = [declared_records(node, "eval") for node in nodes]
    total, exact = sum(n for n, _ in counts), all(e for _, e in counts)
    parts = ", ".join(f"{_shown_name(node)} {'' if e else 'at most '}{n:,}" for node, (n, e) in zip(nodes, counts))
    return "held-out problems", f"{'' if exact else 'at most '}{total:,} ({parts})"


def data_rows(cfg: dict[str, Any]) -> list[tuple[str, str]]:
    """The plan's last rows: the run's refusals of its data that the config alone decides (NOT SUPPORTED), a
    held-out name clash the rows may still avert (a warning), and that the data rows are not read."""
    from klear_lab.dry_run import UNSUPPORTED

    problems = data_problems(cfg)
    rows = [(key, f"{UNSUPPORTED}: {problem}") for key, problem in problems]
    if not problems and (clash := heldout_name_clash(cfg)):
        rows.append(("held-out record names", clash))
    return [*rows, DATA_NOT_READ]


def data_problems(cfg: dict[str, Any]) -> list[tuple[str, str]]:
    """(plan row, why) of each refusal of its data that a run of ``cfg`` makes whatever its data rows hold: its
    training sources' list and ``data.mix`` (:func:`training_problem`), its held-out sources' names
    (:func:`heldout_problem`)."""
    found = [training_problem(cfg), ("held-out sources", heldout_problem(cfg))]
    return [(key, problem) for key, problem in found if problem]


def training_problem(cfg: dict[str, Any]) -> tuple[str, str | None]:
    """(plan row, why) of the run's refusal of its training sources that their config decides: the list
    (``builders.named_pools``: a label another source's pool took), else the ``data.mix`` against the pools'
    labels and quality ranks, in the run's words (``builders.train_and_heldout``'s ConfigError): a ``top_k`` cut
    between sources of one rank, a ``weighted`` key naming no source. A pool's label is its source's ``label``
    or name (``file``, ``file#1``), never its records', so ``named_pools`` gives them without a read (``read``:
    None, "some records"); the mix's ``check_sources`` (``mixes.base``; a plugin mix without it is not checked)
    sees names and ranks only, so no pool size is guessed. Why is None for an eval run (it mixes nothing)."""
    if cfg["run"]["kind"] not in ("sft", "rl"):
        return "data mix", None
    from klear_lab.builders import build
    from klear_lab.data.mixes.base import places_named
    from klear_lab.errors import DataError
    from klear_lab.registry import DATA_MIX

    try:
        _, ranks, where = _named_pools(cfg, "train", lambda node: None)
    except DataError as exc:
        return "training sources", str(exc)
    check = getattr(build(DATA_MIX, cfg["data"]["mix"]), "check_sources", None)
    try:
        if check is not None:
            check(ranks)
    except ValueError as exc:
        return "data mix", f"data.mix {cfg['data']['mix']['name']!r}: {exc}{places_named(str(exc), where)}"
    return "data mix", None


def heldout_problem(cfg: dict[str, Any]) -> str | None:
    """The run's refusal of its held-out sources' names that the config decides (``builders.named_pools``,
    ``eval`` split): a ``label`` another source's pool took (``math#1``) or named as a difficulty level's metric
    (``level1``), or one file read unlabelled by two ``data.eval_sources`` entries alike (:func:`_one_file_twice`).
    An unlabelled file's records are named by its rows' ``source``/``data_source``, else by its file name: two
    such files named alike (``aime24/test.jsonl``, ``aime25/test.jsonl``) are refused only if the rows name no
    source, which a dry run cannot know (:func:`heldout_name_clash` warns)."""
    from klear_lab.errors import DataError

    try:
        _named_pools(cfg, "eval", lambda node: _placeholder(node, default=False))
    except DataError as exc:
        return str(exc)
    return _one_file_twice(cfg["data"].get("eval_sources") or [])


def heldout_name_clash(cfg: dict[str, Any]) -> str | None:
    """The run's refusal of two held-out sources named alike if the unlabelled files' rows name no source (their
    records then take the file's name), with that proviso: a warning, not a refusal."""
    from klear_lab.errors import DataError

    try:
        _named_pools(cfg, "eval", lambda node: _placeholder(node, default=True))
    except DataError as exc:
        return (f"refused by the run if the files' rows name no source (a `source` / `data_source` column, which "
                f"a dry run does not read; the file's name stands in): {exc}")
    return None


def _named_pools(cfg: dict[str, Any], split: str, read: Callable[[dict[str, Any]], Any]):
    """``builders.named_pools`` of ``split``'s sources with ``read`` for their records, its warnings (the run's
    to give) silenced."""
    from klear_lab.builders import named_pools

    nodes = cfg["data"]["sources"] if split == "train" else cfg["data"].get("eval_sources") or []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return named_pools(cfg, split, nodes, read=read)


def _file_source(node: dict[str, Any]) -> Any:
    """The built-in ``file`` source of ``node``, else None (a generated world, a plugin's source)."""
    from klear_lab.builders import build
    from klear_lab.data.sources.file import FileSource
    from klear_lab.registry import SOURCE

    source = build(SOURCE, node)
    return source if isinstance(source, FileSource) else None


def _placeholder(node: dict[str, Any], default: bool) -> list[Any] | None:
    """A held-out file source's records as their one name: its ``label``, or with ``default`` an unlabelled
    one's file name (what its rows are named if they name no source); None (not known) for the others."""
    from klear_lab.data.records import Record

    source = _file_source(node)
    if source is None or not (source.label or default):
        return None
    path = getattr(source, source.path_field("eval")) or ""
    name = source.label or Path(path).stem or path
    return [Record(uid=f"{name}/0", source=name, task="math", prompt="?", answer="?")]


def _one_file_twice(nodes: list[dict[str, Any]]) -> str | None:
    """Two unlabelled held-out ``file`` entries reading one file with one layout and ``source`` column: whatever
    names its rows give their records, both give the same ones, which the run refuses (``pool_checks.
    check_distinct_sources``; an empty file, ``check_some_records``)."""
    from klear_lab.data.pool_checks import file_key, source_path

    first: dict[tuple[str, str, str | None], int] = {}
    for i, node in enumerate(nodes):
        source = _file_source(node)
        if source is None or source.label or not (path := source_path(node, "eval")):
            continue
        j = first.setdefault((file_key(path), source.format, source.fields.get("source")), i)
        if j != i:
            return (f"data.eval_sources.{j} ({source_path(nodes[j], 'eval')}) and data.eval_sources.{i} ({path}) "
                    "read one file without a label: whatever names its rows give their records (their source, "
                    "else the file's name), both give them, and one val/<name>/acc would score both; list the "
                    "file once, or give each entry its own label (`label: aime24`)")
    return None
