"""The up-front checks of what trials would read: data files and rewards this machine cannot use
(``unavailable_trial_inputs``), and the records of each distinct data configuration, built once
(``check_trial_data``), so a bad row stops the sweep instead of failing every trial that reads it; with them, an
RL ``rl.reward`` of another task than the trials' training sources, which each trial would refuse at its start.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from klear_lab.config.layers import override_key
from klear_lab.errors import ConfigError, DataError
from klear_lab.sweep.grid import Arm, trial_layer
from klear_lab.sweep.probe import MAX_COMPOSED_ARMS, probe_values, trial_points
from klear_lab.sweep.spec import SweepSpec

if TYPE_CHECKING:
    from klear_lab.data.records import Record


def unavailable_trial_inputs(spec: SweepSpec, arms: list[Arm]) -> tuple[list[str], list[str]]:
    """``(data, rewards)``: ``key=path: why`` for the data files trials would read and this machine cannot
    (``builders.unavailable_data``), and ``key what: why`` for the rewards they would call and it cannot
    run (``reward_checks.unavailable_rewards``: ``code`` without bubblewrap; also those of a
    ``model.init_from`` starting point that the sweep would train first). From the base experiment's
    config, or where an axis sets what decides them (the data, the rewards, the eval set, the run kind, the
    starting point), each arm's (``tpe``/``random``: each value of such an axis, the others at their first)."""
    from klear_lab.builders import unavailable_data
    from klear_lab.reward_checks import parent_unavailable_rewards, unavailable_rewards

    cfgs = _configs_varied_by(spec, arms, ("data", "rl.reward", "eval", "run.kind", "model.init_from"))
    data = [f"{key}={why}" for cfg in cfgs for key, why in unavailable_data(cfg)]
    rewards = [f"{key} {why}" for cfg in cfgs
               for key, why in [*unavailable_rewards(cfg), *parent_unavailable_rewards(cfg)]]
    return sorted(set(data), key=data.index), sorted(set(rewards), key=rewards.index)


def unavailable_machinery(spec: SweepSpec, arms: list[Arm]) -> tuple[list[str], list[str]]:
    """``(models, engines)``: the checkpoints trials would load and the rollout engines they would start that
    this machine lacks, as ``klear-lab train --dry-run`` marks them (its rows: a hub model not cached with the
    hub offline, an engine's package not installed), each distinct one once. From the base experiment's config,
    or where an axis sets what decides them, each arm's (``tpe``/``random``: each value of such an axis). An engine
    it marks NOT SUPPORTED (no ``start``) stopped the sweep before (``checks.trial_problem``)."""
    from klear_lab.build_model import unavailable_model
    from klear_lab.dry_run import NOT_HERE, model_name

    models, engines = [], []
    for cfg in _configs_varied_by(spec, arms, ("model", "rl.rollout", "run.kind", "eval", "trainer")):
        if cfg["model"]["name_or_path"] and (why := unavailable_model(cfg["model"]["name_or_path"])):
            models.append(f"{model_name(cfg)} ({NOT_HERE}: {why})")
        if NOT_HERE in (engine := _engine_row(cfg)):
            engines.append(engine)
    return list(dict.fromkeys(models)), list(dict.fromkeys(engines))


def _engine_row(cfg: dict[str, Any]) -> str:
    """What ``train --dry-run`` says of the run's rollout engine: an RL run's own row, else the engine part of
    its evaluation row (``eval.engine: rollout``); "" where it starts none."""
    from klear_lab.distributed import device_count
    from klear_lab.dry_run import eval_row
    from klear_lab.stages.rl_plan import rl_plan_rows

    if cfg["run"]["kind"] == "rl":
        return next(f"{key} {value}" for key, value in rl_plan_rows(cfg, device_count(cfg["trainer"]))
                    if key.startswith("rollout engine"))
    evaluation = eval_row(cfg)[1]
    return evaluation[evaluation.index("rollout engine"):] if "rollout engine" in evaluation else ""


def _configs_varied_by(spec: SweepSpec, arms: list[Arm], prefixes: tuple[str, ...]) -> list[dict[str, Any]]:
    """The base experiment's config, or where an axis sets keys under ``prefixes``, each arm's (``tpe``/
    ``random``: each value of such an axis, the others at their first)."""
    axes = [axis for axis in spec.axes if axis.key.startswith(prefixes)]
    if not axes:
        points: list[dict[str, Any]] = [{}]
    elif arms:
        points = [arm.params for arm in arms[:MAX_COMPOSED_ARMS]]
    else:
        first = {a.key: probe_values(a)[0] for a in spec.axes}
        points = [{**first, axis.key: value} for axis in axes for value in probe_values(axis)]
    return [spec.compose([trial_layer(spec, values, spec.seeds[0], None, None, "check")] if values else [])
            for values in points]


def check_trial_data(spec: SweepSpec, arms: list[Arm]) -> None:
    """Read each data file the trials would read, once: every distinct source node with a ``path`` (its
    split, its world seed) across the arms (``tpe``/``random``: each axis value, the others at their
    first), so a bad row stops the sweep before any trial instead of failing each trial that reads it. The
    mixes and filters are left to the trials: building every arm's mix read a multi-GB corpus once per
    ``top_k`` arm, and a generated world has no bad row (a mix's refusals that its sources' labels and ranks
    decide, a ``top_k`` tie say, are ``checks.trial_problem``'s, from each arm's config). Files this machine
    lacks are left to :func:`unavailable_trial_inputs`. A warning raised while reading (repeated uids, say) is
    shown once.
    Then each distinct list of sources goes through the refusals a run makes of the records its sources
    gave (``builders.build_pools``: no records at all, an empty file beside others), from those reads, and
    each distinct RL reward, sources and mix through the run's refusal of a reward of another task
    (:func:`_check_reward_tasks`, its ConfigError), and each distinct ``data.decontaminate_ngram`` setting
    through decontamination (:func:`_check_decontamination`), from the records read: the files it compares are
    kept until then (every such file at once, where arms compare different ones; training records without
    their responses, most of an SFT corpus's bytes), not read again.

    Raises:
        DataError: the source's message (file, row, key), or the run's refusal of a list of sources that
            gave no records, with the config key, the arms that read it and the spec's overrides of
            ``data.`` keys.
    """
    from klear_lab.builders import build, build_pools, source_nodes, source_path, source_sections
    from klear_lab.data.sources.file_read import unavailable
    from klear_lab.registry import SOURCE

    reads: dict[str, tuple[dict[str, Any], str, int, str, list[str]]] = {}
    lists: dict[str, tuple[dict[str, Any], str, str, list[str]]] = {}  # (cfg, section, split, labels)
    rewards: dict[str, tuple[dict[str, Any], list[str]]] = {}  # what decides rl.reward's fit -> (cfg, labels)
    decontaminated: dict[str, tuple[dict[str, Any], list[str]]] = {}  # what decides decontamination -> (cfg, labels)
    kept_whole: set[str] = set()  # read keys of the files decontamination compares: every record kept
    points = trial_points(spec, arms)
    for label, values in points:
        cfg = spec.compose([trial_layer(spec, values, spec.seeds[0], None, None, "check")])
        seed = cfg["data"]["world_seed"]
        fit = [cfg["run"]["kind"], cfg["rl"]["reward"]["name"], cfg["data"]["sources"], cfg["data"]["mix"], seed]
        rewards.setdefault(json.dumps(fit, sort_keys=True, default=str), (cfg, []))[1].append(label)
        decontaminates = bool(cfg["data"]["decontaminate_ngram"]) and cfg["run"]["kind"] in ("sft", "rl")
        if decontaminates:
            d = cfg["data"]
            what = [d["sources"], d["eval_sources"], d["decontaminate_ngram"], seed]
            decontaminated.setdefault(json.dumps(what, sort_keys=True, default=str), (cfg, []))[1].append(label)
        for section, split in source_sections(cfg):
            key = json.dumps([cfg["data"][section], split, seed], sort_keys=True, default=str)
            lists.setdefault(key, (cfg, section, split, []))[3].append(label)
        for section, split, i, node in source_nodes(cfg):
            path = source_path(node, split)
            if path is None or unavailable(path):
                continue
            key = _read_key(node, split, seed)
            reads.setdefault(key, (node, split, seed, f"data.{section}.{i}", []))[4].append(label)
            if decontaminates:
                kept_whole.add(key)

    def refused(where: str, labels: list[str], exc: Exception) -> DataError:
        who = _data_origin(spec, list(dict.fromkeys(labels)), len(arms) or len(points), bool(arms))
        return DataError(f"{spec.path}: {where}, read by {who}: {exc}; no trial was started")

    gave: dict[str, list[Record]] = {}  # read key -> a record of each source name in the file's (none: empty)
    levels: dict[str, set[int]] = {}  # read key -> the difficulty levels its records give (none: no such column)
    whole: dict[str, list[Record]] = {}  # read key (of kept_whole) -> every record of the file
    tasks: dict[str, set[str]] = {}  # read key -> the tasks of its records (reward_checks.source_tasks' cache)
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for key, (node, split, seed, where, labels) in reads.items():
                try:
                    records = build(SOURCE, node).records(seed, split)
                except (ConfigError, DataError) as exc:
                    raise refused(where, labels, exc) from None
                gave[key] = list({r.source: r for r in records}.values())
                levels[key] = {r.difficulty for r in records if r.difficulty_known}
                tasks[key] = {r.task for r in records}
                if key in kept_whole:  # what decontamination reads, without the bulk (responses)
                    whole[key] = [replace(r, response=None, meta={}) for r in records] if split == "train" \
                        else records
            for cfg, section, split, labels in lists.values():
                seed = cfg["data"]["world_seed"]
                try:  # a source not read (a generated world, a file not here) is taken as giving records
                    build_pools(cfg, split, cfg["data"][section],
                                read=lambda node, split=split, seed=seed: gave.get(_read_key(node, split, seed)))
                except (ConfigError, DataError) as exc:
                    raise refused(f"data.{section}", labels, exc) from None
    finally:  # once each, where they were raised
        shown = {(w.category, str(w.message)): w for w in caught}
        for w in shown.values():
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    for cfg, section, _, labels in lists.values():
        if section == "eval_sources" and (why := _unlogged_level(spec, cfg, levels)):
            raise refused("data.eval_sources", labels, why)
    _check_reward_tasks(spec, list(rewards.values()), tasks, len(arms) or len(points), bool(arms))
    for cfg, labels in decontaminated.values():
        _check_decontamination(cfg, whole, lambda exc, labels=labels: refused("data.decontaminate_ngram", labels, exc))


def _check_decontamination(cfg: dict[str, Any], whole: dict[str, list[Record]], refused: Any) -> None:
    """The run's refusal of a training source that ``data.decontaminate_ngram`` empties (its held-out file
    read as training data, say), which every trial would meet after the sweep trained their starting point.
    From the records read above (``whole``: every record of each file, by read key); a source without a file
    (a generated world) is generated again. Skipped where a file is not on this machine
    (:func:`unavailable_trial_inputs` says so)."""
    from klear_lab.builders import build, build_eval_records, named_pools, unavailable_data
    from klear_lab.data.decontaminate import decontaminated_pools
    from klear_lab.registry import SOURCE

    if unavailable_data(cfg):
        return
    seed = cfg["data"]["world_seed"]

    def records(node: dict[str, Any], split: str) -> list[Record]:
        key = _read_key(node, split, seed)
        return whole[key] if key in whole else build(SOURCE, node).records(seed, split)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the reads above showed each once
            pools, _, where = named_pools(cfg, "train", cfg["data"]["sources"],
                                          read=lambda node: records(node, "train"))
            eval_records = build_eval_records(cfg, read=lambda node: records(node, "eval"))
        decontaminated_pools(pools, eval_records, cfg["data"]["decontaminate_ngram"], quiet=True, where=where)
    except (ConfigError, DataError) as exc:
        raise refused(exc) from None


def _check_reward_tasks(spec: SweepSpec, groups: list[tuple[dict[str, Any], list[str]]], tasks: dict[str, set[str]],
                        total: int, grid: bool) -> None:
    """Refuse an RL ``rl.reward`` of another task than the training sources of the trials (each distinct reward,
    sources and mix once; ``reward_checks.reward_task_problem``), which each trial refuses at its start, before
    the sweep trains their shared starting point. ``tasks``: the tasks of the files read, by read key; each
    distinct generated world is generated once into it.

    Raises:
        ConfigError: the run's refusal, with the trials it is of and the spec's overrides of the keys deciding it.
    """
    from klear_lab.reward_checks import reward_task_problem

    found = [(problem, labels) for cfg, labels in groups if (problem := reward_task_problem(cfg, True, tasks))]
    if found:
        said = "; ".join(f"in {_data_origin(spec, labels, total, grid, REWARD_KEYS)}, {problem}"
                         for problem, labels in found)
        raise ConfigError(f"{spec.path}: {said}; no trial was started")


def _read_key(node: dict[str, Any], split: str, seed: int) -> str:
    """What decides the records a source node gives (``reward_checks.source_key``, the tasks' cache key too)."""
    from klear_lab.reward_checks import source_key

    return source_key(node, split, seed)


DATA_KEYS = ("data", "run.kind")  # the overrides that decide what trials read
REWARD_KEYS = ("data.sources", "data.mix", "data.filter", "data.world_seed", "run.kind", "rl.reward")
"""The overrides that decide which training records an RL run draws and which reward scores them."""


def _data_origin(spec: SweepSpec, labels: list[str], total: int, grid: bool, keys: tuple[str, ...] = DATA_KEYS) -> str:
    """Which trials read a data configuration, and the overrides of the ``keys`` (and keys under them) they share."""
    if len(labels) == total:
        who = "every arm" if grid else "every trial"
    else:
        who = f"{'arm' if grid else 'trials with'} {', '.join(labels[:4])}{' ...' if len(labels) > 4 else ''}"
    own = len(spec.overrides) - len(spec.cli_overrides)
    data: dict[str, list[str]] = {"overrides": [], "command line": []}  # each named once: "overrides: a; b"
    for i, item in enumerate(spec.overrides):
        if any(override_key(item) == key or override_key(item).startswith(f"{key}.") for key in keys):
            data["command line" if i >= own else "overrides"].append(item)
    said = [f"{where}: {'; '.join(items)}" for where, items in data.items() if items]
    return f"{who} ({'; '.join(said)})" if said else who


def _unlogged_level(spec: SweepSpec, cfg: dict[str, Any], levels: dict[str, set[int]]) -> str | None:
    """Why the trials of ``cfg`` would not log the spec's ``val/level<N>/acc`` (its objective or a table metric):
    every held-out source is a file read here, and none has records of level N (files without a ``difficulty``
    column have none). A source not read (a generated world, a file not here) may give it: not refused."""
    import re

    from klear_lab.builders import source_nodes

    wanted = [(m, int(found.group(1))) for m in [spec.metric, *spec.metrics]
              if (found := re.fullmatch(r"val/level(\d+)/acc", m))]
    seed = cfg["data"]["world_seed"]
    keys = [_read_key(node, split, seed) for section, split, _, node in source_nodes(cfg) if section == "eval_sources"]
    if not wanted or not keys or any(key not in levels for key in keys):
        return None
    given = set().union(*(levels[key] for key in keys))
    missing = [metric for metric, level in wanted if level not in given]
    return (f"no held-out record is of the difficulty level {', '.join(missing)} scores (levels given: "
            f"{sorted(given) or 'none: no `difficulty` column'}), so the trials would not log it") if missing else None
