"""Builders: the only code that reads the config. They turn config nodes into objects."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Collection, Iterator
from typing import Any

import torch

from klear_lab.config.checks import EVAL_GRADERS
from klear_lab.config.validate import component_args
from klear_lab.data.decontaminate import decontaminated_pools
from klear_lab.data.filters.base import filtered_records
from klear_lab.data.mixes.base import mixed_records, places_named
from klear_lab.data.pool_checks import (
    check_distinct_sources,
    check_some_records,
    warn_repeated_files,
    warn_shared_record_names,
    warn_unread_eval_paths,
)
from klear_lab.data.pool_checks import source_path as source_path  # importable from here too
from klear_lab.data.records import Record, require_gradeable
from klear_lab.data.sources.base import SplitExhausted
from klear_lab.data.training_stats import record_stats, repeat_stats
from klear_lab.errors import ConfigError, DataError, component_error
from klear_lab.hardware import auto_threads
from klear_lab.registry import DATA_MIX, DIFFICULTY_FILTER, REWARD, ROLLOUT, SOURCE


def build(registry, node: dict[str, Any], **runtime: Any) -> Any:
    return registry.build(component_args(node, registry.axis), **runtime)


def set_threads(cfg: dict[str, Any]) -> int:
    """Torch threads: explicit, or cores divided by the parallel workers of a sweep, at most
    ``OMP_NUM_THREADS`` where the user set it.

    Two processes with torch's default threads on 2 cores run 3x slower than one (environment.md).
    The count is the run's: a CPU DDP run's ``trainer.devices`` processes share it (so a sweep's
    cores // workers per trial stays right for multi-process trials).
    """
    from klear_lab.distributed import local_processes

    n = cfg["trainer"]["num_threads"]
    if n <= 0:
        n = auto_threads(int(os.environ.get("KLEAR_PARALLEL_WORKERS", "1")))
    n = max(n // local_processes(cfg["trainer"]), 1)
    torch.set_num_threads(n)
    return n


def source_sections(cfg: dict[str, Any]) -> list[tuple[str, str]]:
    """``(section, split)`` of each list of data sources a run of ``cfg`` reads (``data.sources`` for
    ``train``, ``data.eval_sources`` for ``eval``); an eval run reads its eval sources only."""
    sections = [("sources", "train"), ("eval_sources", "eval")]
    return sections if (cfg.get("run") or {}).get("kind") != "eval" else sections[1:]  # a partial saved config too


def source_nodes(cfg: dict[str, Any]) -> Iterator[tuple[str, str, int, dict[str, Any]]]:
    """``(section, split, index, node)`` of each data source a run of ``cfg`` reads (:func:`source_sections`)."""
    for section, split in source_sections(cfg):
        for i, node in enumerate(cfg["data"].get(section) or []):
            yield section, split, i, node


def build_pools(cfg: dict[str, Any], split: str, nodes: list[dict[str, Any]],
                read: Callable[[dict[str, Any]], list[Record] | None] | None = None,
                ) -> tuple[dict[str, list[Record]], dict[str, int]]:
    """Records per source (``split`` of each), keyed by a unique source label, with quality ranks
    (:func:`named_pools`, without where each pool came from)."""
    pools, ranks, _ = named_pools(cfg, split, nodes, read)
    return pools, ranks


def named_pools(cfg: dict[str, Any], split: str, nodes: list[dict[str, Any]],
                read: Callable[[dict[str, Any]], list[Record] | None] | None = None,
                ) -> tuple[dict[str, list[Record]], dict[str, int], dict[str, str]]:
    """Records per source (``split`` of each), keyed by a unique source label (:func:`pool_label`), with
    quality ranks and where each pool came from (``data.sources.1 (data/b.jsonl)``, for messages).

    ``read`` gives a source node's records in place of reading them (the sweep's up-front check, which
    has read each file once): None where it has not read them (a generated world, a file this machine
    lacks), taken as some records, so the refusals below are those a run of ``cfg`` makes.

    Raises:
        DataError: no source gave records (``data.sources``; ``data.eval_sources`` when it lists any), a
            source gave none while others did not (its key and file named), two held-out sources
            name their records alike and one of them has no label (two ``test.jsonl``), or a held-out
            source names its records as a difficulty level's metric does (``level1``).
    """
    pools: dict[str, list[Record]] = {}
    ranks: dict[str, int] = {}
    section = "data.sources" if split == "train" else "data.eval_sources"
    where: dict[str, str] = {}  # pool label -> config key and file, for messages
    unlabelled: set[str] = set()  # pools of sources that take a label and were given none (a file's)
    for i, node in enumerate(nodes):
        source = build(SOURCE, node)
        if not hasattr(source, "quality_rank"):  # a plugin's: the mixes rank by it (an AttributeError, exit 1)
            raise component_error(f"{section}.{i}", source, "has no quality_rank attribute: a source gives "
                                  "records(seed, split) and a quality_rank (1 = the best; data/sources/base.py)")
        records = source_records(source, node, split, cfg["data"]["world_seed"], read, f"{section}.{i}")
        path = source_path(node, split)
        label = pool_label(source, node, i, pools)
        if label in pools:  # a hand-written "math#2" label, say: the earlier pool would be replaced silently
            raise DataError(f"{section}.{i}: source label {label!r} is already taken by {where[label]}; "
                            "give the sources distinct labels")
        pools[label] = records
        ranks[label] = source.quality_rank
        where[label] = f"{section}.{i}" + (f" ({path})" if path else "")
        if hasattr(source, "label") and not source.label:
            unlabelled.add(label)
    check_some_records(pools, where, split, nodes)
    if split == "eval":  # training records of one name merge harmlessly (a share metric, a rollout seed)
        check_distinct_sources(pools, where, unlabelled)
        from klear_lab.eval.heldout import check_level_names

        check_level_names(pools, where)  # val/level1/acc is a difficulty level's
    else:
        warn_repeated_files(nodes, list(pools))
        warn_shared_record_names(pools, where, unlabelled)
        warn_unread_eval_paths(cfg, nodes)
    return pools, ranks, where


def source_records(source: Any, node: dict[str, Any], split: str, seed: int,
                   read: Callable[[dict[str, Any]], list[Record] | None] | None, key: str) -> list[Record] | None:
    """The ``split`` records of ``source`` (``read(node)`` where given), its errors prefixed with ``key``."""
    try:
        return source.records(seed, split) if read is None else read(node)
    except SplitExhausted as exc:
        raise ConfigError(f"{key}.{exc}") from None
    except DataError as exc:  # a missing file: the key that names it, as --dry-run says
        if not str(exc).startswith("data file ") or not hasattr(source, "path_field"):
            raise
        raise DataError(f"{key}.{source.path_field(split)}: {exc}") from None


def pool_label(source: Any, node: dict[str, Any], index: int, taken: Collection[str]) -> str:
    """The pool label of source ``index`` (built from ``node``): its ``label`` (a file source's, which names
    its metrics too) or its name, with ``#index`` where an earlier source took that. An unlabelled file source's
    pool is so ``file``, ``file#1``: the data mix draws each pool's records by a seed keyed by this name, so
    naming it otherwise would draw other records for configs of runs made before, under the same hash."""
    name = getattr(source, "label", None) or node["name"]
    return name if name not in taken else f"{name}#{index}"


def build_train_records(cfg: dict[str, Any]) -> tuple[list[Record], dict[str, float]]:
    """Sources -> n-gram decontamination (``data.decontaminate_ngram``, against the held-out records) ->
    difficulty filter (per source) -> data mix. Returns records and data stats."""
    return train_and_heldout(cfg)[:2]


def build_run_records(cfg: dict[str, Any], quiet: bool = False) -> tuple[list[Record], dict[str, float], list[Record]]:
    """:func:`build_train_records` and :func:`build_eval_records`, the held-out records built once; ``quiet``:
    without the decontamination line (a check of records another run trained on)."""
    records, stats, eval_records = train_and_heldout(cfg, quiet)
    return records, stats, build_eval_records(cfg) if eval_records is None else eval_records


def train_and_heldout(cfg: dict[str, Any], quiet: bool = False,
                      ) -> tuple[list[Record], dict[str, float], list[Record] | None]:
    """Training records, data stats and the held-out records they were compared with (None: not compared;
    then built after the training ones, as before the key: a plugin source may draw from the global RNGs)."""
    pools, ranks, where = named_pools(cfg, "train", cfg["data"]["sources"])  # refuses sources that gave no records
    stats: dict[str, float] = {}
    eval_records = None
    if n := cfg["data"].get("decontaminate_ngram") or 0:  # a partial saved config from before the key: off
        eval_records = build_eval_records(cfg)
        pools, stats = decontaminated_pools(pools, eval_records, n, quiet, where)  # said by global rank 0 only
    flt = build(DIFFICULTY_FILTER, cfg["data"]["filter"])
    filtered = {}
    for name, recs in pools.items():
        try:
            filtered[name] = filtered_records(flt, recs, name)
        except ValueError as exc:  # the filter cannot act on this source's records
            raise DataError(f"data.filter {cfg['data']['filter']['name']!r} on source {name!r} of {where[name]}: "
                            f"{exc}") from None
        stats[f"data/kept_frac/{name}"] = len(filtered[name]) / max(len(recs), 1)  # of what decontamination left
    empty = [n for n, r in filtered.items() if not r]
    if len(empty) == len(filtered):
        raise DataError(f"data.filter {cfg['data']['filter']['name']!r} removed every record of "
                        f"every source ({', '.join(pools)})")
    mix = build(DATA_MIX, cfg["data"]["mix"])
    try:
        records = mixed_records(mix, filtered, ranks, cfg["run"]["seed"])  # emptied sources too: top_k skips none
    except ValueError as exc:
        raise ConfigError(f"data.mix {cfg['data']['mix']['name']!r}: {exc}{places_named(str(exc), where)}") from None
    stats.update(repeat_stats(filtered, records, cfg["data"]["mix"]["name"]))
    return records, {**stats, **record_stats(records)}, eval_records


def build_eval_records(cfg: dict[str, Any], read: Callable[[dict[str, Any]], list[Record]] | None = None,
                       ) -> list[Record]:
    """The held-out records (``read``: a source node's, as :func:`build_pools` takes them, every one given)."""
    pools, _ = build_pools(cfg, "eval", cfg["data"]["eval_sources"], read)  # refuses sources that gave no records
    records = [r for recs in pools.values() for r in recs]
    require_gradeable(records, "data.eval_sources")
    return records


def build_eval_rewards(cfg: dict[str, Any]) -> dict[str, Any]:
    """Verifier per task family: ``math`` and ``code``."""
    return {task: build(REWARD, cfg["eval"][key]) for task, key in EVAL_GRADERS}


def unavailable_data(cfg: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, ``path: why``) for each source whose data cannot be read on this machine, as the source says
    (``unavailable(split)``, e.g. ``file``): the config may be meant for another one; the dry run and
    ``--validate-only`` say so, and a sweep refuses to start."""
    out = []
    for section, split, i, node in source_nodes(cfg):
        found = getattr(build(SOURCE, node), "unavailable", lambda _split: None)(split)
        if found:
            out.append((f"data.{section}.{i}.{found[0]}", found[1]))
    return out


def tokenizer_corpus(records: list[Record], eval_records: list[Record]) -> list[str]:
    """Text a tiny tokenizer is trained on: prompts and responses (eval prompts too, never answers)."""
    texts = [r.prompt + (r.response or "") for r in records[:5000]]
    return texts + [r.prompt for r in eval_records]


def eval_sampling(cfg: dict[str, Any], records: list[Record]):
    """How held-out completions are drawn (``eval.samples`` and ``samples_per_source``, ``temperature``,
    ``top_p``, ``top_k``, ``repetition_penalty``; the run seed). A ``samples_per_source`` key must name
    a source of ``records``, so that a typo does not silently evaluate at ``eval.samples``."""
    from klear_lab.eval.heldout import Sampling

    ev = cfg["eval"]
    sources = sorted({r.source for r in records})
    for name in ev["samples_per_source"]:
        if name not in sources:
            raise ConfigError(f"eval.samples_per_source.{name}: no held-out source is named {name!r} "
                              f"(data.eval_sources give: {', '.join(sources) or 'none'}; a file source's "
                              "name is its `label`); drop it with eval.samples_per_source=null and set again "
                              "the ones you want")
    per_source = tuple((str(k), int(v)) for k, v in ev["samples_per_source"].items() if int(v) != ev["samples"])
    return Sampling(samples=ev["samples"], temperature=ev["temperature"], top_p=ev["top_p"], seed=cfg["run"]["seed"],
                    top_k=ev["top_k"], repetition_penalty=ev["repetition_penalty"], per_source=per_source)


def eval_engine(cfg: dict[str, Any], shared=None):
    """``eval.engine: rollout``: an :class:`EvalEngine` on ``shared`` (RL's running engine) or on a
    fresh engine of kind ``rl.rollout`` (checked startable and importable now); ``generate``: None.

    An ``hf`` rollout engine is what ``generate`` runs anyway: None too, so ``eval.batch_size`` (not
    ``rl.rollout.batch_size``) batches the evaluation either way.
    """
    if cfg["eval"]["engine"] != "rollout" or cfg["rl"]["rollout"]["name"] == "hf":
        return None
    from klear_lab.eval.engine import OWNED_KEY, EvalEngine
    from klear_lab.rl.rollout.checks import check_rollout_engine

    if shared is not None:
        return EvalEngine(shared=shared)
    from klear_lab.distributed import several_devices

    if several_devices(cfg["trainer"]):
        raise ConfigError(f"eval.engine: rollout with {cfg['rl']['rollout']['name']!r} on several devices "
                          f"(trainer.devices={cfg['trainer']['devices']!r}) is not supported yet: every rank would "
                          "start its own engine. Use eval.engine=generate, or score the finished run with "
                          "`klear-lab eval RUN_DIR eval.engine=rollout`")
    engine = build(ROLLOUT, cfg["rl"]["rollout"])
    check_rollout_engine(engine, OWNED_KEY)  # as an RL run checks its own: a plugin engine without start
    if hasattr(engine, "check_available"):
        engine.check_available()
    return EvalEngine(config=engine)


def warmup_problem(o: dict[str, Any], total_steps: int) -> str | None:
    """What a warmup as long as the run's ``total_steps`` scheduled steps does (a short debug run of a full
    recipe: legal, but not what it says), or None."""
    if not o["warmup_steps"] >= total_steps > 0:
        return None
    reached = (f"the learning rate ends at {o['lr'] * total_steps / o['warmup_steps']:.3g}, below "
               f"optim.lr={o['lr']:g}" if o["warmup_steps"] > total_steps
               else f"the learning rate reaches optim.lr={o['lr']:g} only at the last step")
    return (f"optim.warmup_steps={o['warmup_steps']} is not below the run's {total_steps} scheduled steps: "
            f"{reached}, and no {o['schedule']} phase runs")


def optim_settings(cfg: dict[str, Any], total_steps: int):
    from klear_lab.modules.optim import OptimSettings

    o = cfg["optim"]
    if o["schedule"] not in ("cosine", "constant"):
        raise ConfigError(f"optim.schedule must be 'cosine' or 'constant', got {o['schedule']!r}")
    if problem := warmup_problem(o, total_steps):
        warnings.warn(problem, UserWarning, stacklevel=2)
    return OptimSettings(lr=o["lr"], min_lr=o["min_lr"], warmup_steps=o["warmup_steps"], total_steps=total_steps,
                         weight_decay=o["weight_decay"], betas=tuple(o["betas"]), schedule=o["schedule"],
                         bf16_rounding=o["bf16_rounding"], seed=cfg["run"]["seed"])
