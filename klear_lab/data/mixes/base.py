"""Shared pieces of the data mixes: the call contract, budget splitting and seeded sampling.

A mix is a registered frozen dataclass called as ``mix(pools, ranks, seed) -> list[Record]``: the records
drawn from the pools, shuffled. The run logs ``data/mix_share/<source>`` from the records it returns
(``share_metrics``). The built-in mixes split the call in two, a convention a new mix may follow:

* ``plan(sizes, ranks) -> {source: count}``: pure, how many records each source contributes;
* ``__call__`` draws that plan from the pools (``draw``);
* ``check_sources(ranks)`` (optional): raises the ValueError ``plan`` would raise from the sources' names and
  quality ranks alone (``ranks``: source -> rank), whatever the pools hold. ``train --dry-run`` and a sweep's
  checks call it, before any data row is read (``dry_run_data.training_problem``); ``top_k`` and ``weighted`` have it.

A pool may be empty (the difficulty filter removed all its records). It stays in ``pools`` so that
a plan giving it a share fails, naming it, instead of quietly handing its place to another source
(``top_k`` with K=1 would train on the second-best source).

Sampling is without replacement whenever a pool holds at least its count. A pool smaller than
its count is repeated whole as often as it fits and the rest is drawn without replacement, so
its records appear at most ``ceil(count / len(pool))`` times (the budget is always met exactly).
Which records of a larger pool are drawn is ``select``: ``random``, or ``kcenter`` (K-Center Greedy
on the prompts, as the paper's Tables 2, 4 and 5; see ``mixes.kcenter``).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

from klear_lab.data.mixes.kcenter import kcenter_take
from klear_lab.data.records import Record
from klear_lab.errors import component_error

SELECTIONS = ("random", "kcenter")
MAX_KCENTER_DIM = 65536


def mixed_records(mix: Any, pools: Mapping[str, list[Record]], ranks: Mapping[str, int], seed: int) -> list[Record]:
    """``mix(pools, ranks, seed)``, checked: a mix returns a non-empty list of Records. A plugin's that returned
    its pools (a dict) or a count failed in the data stats with an AttributeError or TypeError naming nothing,
    and one that returned no record was reported as data without teacher responses."""
    out = mix(pools, ranks, seed)
    contract = "a data mix returns the list of Records it draws from the pools"
    if isinstance(out, (str, bytes, Mapping)) or not isinstance(out, Sequence):
        raise component_error("data.mix", mix, f"returned {type(out).__name__} ({repr(out)[:60]}); {contract}")
    wrong = next((r for r in out if not isinstance(r, Record)), None)
    if wrong is not None:
        raise component_error("data.mix", mix, f"returned a {type(wrong).__name__} ({repr(wrong)[:60]}) among its "
                              f"records; {contract}")
    if not out and any(pools.values()):
        raise component_error("data.mix", mix, f"drew no record from pools of {sum(map(len, pools.values()))} "
                              f"records ({', '.join(sorted(pools))}); {contract}")
    return list(out)


def draw(pools: Mapping[str, list[Record]], counts: Mapping[str, int], seed: int,
         select: str = "random", kcenter_dim: int = 256) -> list[Record]:
    """``counts[name]`` records from each pool, deterministic in ``seed``, shuffled together."""
    out: list[Record] = []
    for name in sorted(counts):
        rng = random.Random(f"mix/{seed}/{name}")
        out.extend(take(pools[name], counts[name], rng, name, select, kcenter_dim))
    random.Random(f"mix/{seed}/shuffle").shuffle(out)
    return out


def take(pool: list[Record], n: int, rng: random.Random, name: str = "pool",
         select: str = "random", kcenter_dim: int = 256) -> list[Record]:
    """``n`` records of ``pool``: without replacement if it is large enough, else whole repeats + rest."""
    if n <= 0:
        return []
    if not pool:
        raise ValueError(f"source {name!r} has no records (after data.filter) but its share is {n}")
    repeats, rest = divmod(n, len(pool))
    if select == "kcenter":
        return list(pool) * repeats + kcenter_take(pool, rest, rng, kcenter_dim)
    return list(pool) * repeats + rng.sample(pool, rest)


def check_selection(select: str, kcenter_dim: int) -> None:
    """Raise ValueError for an unknown ``select`` or a non-positive ``kcenter_dim``."""
    if select not in SELECTIONS:
        raise ValueError(f"select must be one of {list(SELECTIONS)}, got {select!r}")
    if not 1 <= kcenter_dim <= MAX_KCENTER_DIM:  # wider, the clip to keep dot products exact would zero them
        raise ValueError(f"kcenter_dim must be in [1, {MAX_KCENTER_DIM}], got {kcenter_dim}")


def split_evenly(budget: int, names: list[str]) -> dict[str, int]:
    """``budget`` split evenly over ``names``; the remainder goes one each to the first names."""
    if not names:
        raise ValueError("no sources to mix")
    share, extra = divmod(budget, len(names))
    return {name: share + (i < extra) for i, name in enumerate(names)}


def by_rank(names: list[str], ranks: Mapping[str, int]) -> list[str]:
    """``names`` best first (quality_rank 1 = best; ties broken by name). Raises on a missing rank."""
    if missing := sorted(set(names) - set(ranks)):
        raise ValueError(f"no quality_rank for sources {missing}")
    return sorted(names, key=lambda name: (ranks[name], name))


def share_metrics(counts: Mapping[str, int]) -> dict[str, float]:
    """``{"data/mix_share/<source>": fraction}`` of a plan, for logging."""
    total = sum(counts.values()) or 1
    return {f"data/mix_share/{name}": n / total for name, n in sorted(counts.items())}


def places_named(message: str, where: Mapping[str, str]) -> str:
    """``; sft is data.sources.0 (data/sft.jsonl)`` for each pool read from a file (``where``: pool -> its config
    key and file) that ``message`` names: a mix's error names pools, and a file source's pool is named by its
    records, not by the entry that holds it."""
    named = [f"{pool} is {place}" for pool, place in where.items()
             if place.endswith(")") and re.search(rf"(?<![\w#]){re.escape(pool)}(?![\w#])", message)]
    return f"; {', '.join(named)}" if named else ""
