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
from pathlib import Path
from typing import Any

from klear_lab.distributed import device_count
from klear_lab.stages.sft_steps import planned_sft_steps, rows_per_micro_batch

PER_ROW_EXAMPLES = (2, 3)  # the packings the steps row names beside one example per row
DATA_NOT_READ = ("data rows", "not read or checked by a dry run: the run checks them as it starts, before its "
                 "run directory exists (a sweep's: `klear-lab sweep SPEC --validate-only`)")


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
