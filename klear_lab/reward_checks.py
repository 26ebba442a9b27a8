"""Rewards this machine cannot run (``code`` without bubblewrap), found before a run starts.

A run that would call one is refused before any data, model or starting point is built and before its
run directory is written (:func:`check_rewards_available`), instead of at its first score after minutes
of loading and training; the dry run marks it NOT AVAILABLE HERE and a sweep refuses to start. A reward
says so itself with an optional ``unavailable()`` (:class:`klear_lab.rewards.base.RewardFn`). Also an RL
``rl.reward`` of another task than its training sources (:func:`reward_task_problem`), which the run refuses at its
start: the dry run and a sweep's up-front checks refuse it too, before a sweep trains its shared starting point.
Like :mod:`klear_lab.builders`, this reads the config.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

from klear_lab.builders import build, pool_label, source_nodes, source_path
from klear_lab.config.checks import EVAL_GRADERS, reward_tasks
from klear_lab.errors import ConfigError
from klear_lab.registry import DATA_MIX, REWARD, SOURCE
from klear_lab.rl.rollout.base import preserve_rng

ONE_TASK = ("math", "code")  # a source whose ``task`` is one of these gives only records of it
BUILTIN_MIXES = "klear_lab.data.mixes."  # whose ``plan(sizes, ranks)`` says which sources they draw


def reward_unavailable(node: dict[str, Any]) -> str | None:
    """Why the reward of config node ``node`` cannot run on this machine, as the reward says (its optional
    ``unavailable()``, e.g. ``code`` without bubblewrap), or None. A reward without that hook is not built."""
    if not hasattr(REWARD.get(node["name"]), "unavailable"):
        return None
    return build(REWARD, node).unavailable()


def source_key(node: dict[str, Any], split: str, seed: int) -> str:
    """What decides the records a source node gives: the node, the split, ``data.world_seed``."""
    return json.dumps([node, split, seed], sort_keys=True, default=str)


def source_tasks(cfg: dict[str, Any], split: str, read: bool = True, cache: dict[str, set[str]] | None = None,
                 ) -> tuple[dict[str, set[str]], list[str]]:
    """``({key: tasks}, unknown keys)`` of the ``split`` sources a run of ``cfg`` reads (``data.sources.0``...).
    A source that sets its ``task`` (a file's ``task: code``, the embedded worlds' class ``task``) is not read
    or generated; another generated world is generated (no file is read); a file of ``task: auto`` is read
    only with ``read`` (the dry run reads no data). One that cannot be read here or fails to (its own checks
    say why) is unknown. ``cache``: tasks by :func:`source_key`, looked up and filled (a sweep generates each
    distinct world once, reads no file twice)."""
    found: dict[str, set[str]] = {}
    unknown: list[str] = []
    seed = cfg["data"]["world_seed"]
    for section, node_split, i, node in source_nodes(cfg):
        if node_split != split:
            continue
        key, cached = f"data.{section}.{i}", (cache or {}).get(source_key(node, split, seed))
        if node.get("task") not in (None, "auto"):
            found[key] = {node["task"]}
            continue
        if cached is not None:
            found[key] = cached
            continue
        source = build(SOURCE, node)
        if getattr(source, "task", "auto") in ONE_TASK:  # a generated world says its task: not generated
            found[key] = {source.task}
            continue
        missing = getattr(source, "unavailable", lambda _split: None)(split)
        if missing or (source_path(node, split) is not None and not read):
            unknown.append(key)
            continue
        try:  # the global RNGs as they were: a run reads its data after this
            with warnings.catch_warnings(), preserve_rng():  # a repeated uid, say: the run's own read warns
                warnings.simplefilter("ignore")
                found[key] = {r.task for r in source.records(seed, split)}
        except Exception:  # noqa: BLE001 - a bad row, an unreadable file: the data checks and the run say so
            unknown.append(key)
            continue
        if cache is not None:
            cache[source_key(node, split, seed)] = found[key]
    return found, unknown


def eval_tasks(cfg: dict[str, Any], read: bool = True) -> tuple[set[str], list[str]]:
    """The tasks of the held-out records a run of ``cfg`` grades, and the keys of the eval sources whose tasks
    stay unknown (:func:`source_tasks`)."""
    found, unknown = source_tasks(cfg, "eval", read)
    return set().union(*found.values()), unknown


def reward_task_message(reward: str, held: str, tasks: set[str]) -> str:
    """Why ``rl.reward`` cannot score the training prompts: ``held`` says which hold the ``tasks`` it does not
    score. One wording for the run's refusal (``stages.rl.check_reward_tasks``) and the up-front checks."""
    scored = REWARD.get(reward).tasks
    fits = [name for name in REWARD.names() if tasks <= set(reward_tasks(name))]
    choose = (f"choose the reward of their task ({' or '.join(f'rl.reward={name}' for name in fits)})" if fits
              else f"no one reward scores {' and '.join(sorted(tasks))}: train on one task")
    return (f"rl.reward {reward!r} scores {'/'.join(scored)} tasks, but {held}: {choose} or leave them out of "
            "the sources")


def reward_task_problem(cfg: dict[str, Any], read: bool = True, cache: dict[str, set[str]] | None = None,
                        ) -> str | None:
    """Why an RL run of ``cfg`` would refuse its ``rl.reward`` for the tasks of its training prompts
    (``stages.rl.check_reward_tasks``), found from the config (:func:`source_tasks`), or None: each source the
    data mix draws from must hold tasks the reward declares (a reward that declares no ``tasks`` is trusted,
    and a source of unknown task is let be; the run checks its records). Where the sources drawn are not known
    from the config (:func:`_drawn_sources`), only a run whose every source holds other tasks is refused."""
    reward = cfg["rl"]["reward"]["name"]
    scored = getattr(REWARD.get(reward), "tasks", None) if cfg["run"]["kind"] == "rl" else None
    if scored is None:
        return None
    found, _ = source_tasks(cfg, "train", read, cache)
    tasks = {i: found.get(f"data.sources.{i}") for i in range(len(cfg["data"]["sources"]))}  # None: unknown
    off = {i: sorted(t - set(scored)) for i, t in tasks.items() if t is not None}
    drawn = _drawn_sources(cfg)
    if drawn is None:  # which sources give records is not known here: refuse only where every record is off-task
        every_off = all(t and not t & set(scored) for t in tasks.values())
        drawn = set(off) if every_off else set()
    held, other = [], set()
    for i in sorted(drawn & set(off)):
        if off[i]:
            held.append(f"data.sources.{i} ({_describe(cfg['data']['sources'][i])}) holds {'/'.join(off[i])} records")
            other.update(off[i])
    return reward_task_message(reward, " and ".join(held), other) if held else None


def unread_reward_sources(cfg: dict[str, Any]) -> list[str]:
    """The training sources (``data.sources.0``...) whose task is not known without reading them (a file of
    ``task: auto``) where ``rl.reward`` declares the tasks it scores: what the dry run, which reads no data,
    leaves to the run's own check of its records and to ``sweep --validate-only``, which reads them."""
    if cfg["run"]["kind"] != "rl" or getattr(REWARD.get(cfg["rl"]["reward"]["name"]), "tasks", None) is None:
        return []
    return source_tasks(cfg, "train", read=False)[1]


def _describe(node: dict[str, Any]) -> str:
    path = source_path(node, "train")
    return f"{node['name']} {path}" if path else node["name"]


def _drawn_sources(cfg: dict[str, Any]) -> set[int] | None:
    """The indices of ``data.sources`` a built-in data mix draws records from, by its ``plan`` (a ``top_k`` mix
    keeps the best k, a ``weighted`` one those of a positive weight), or None where that is not known from the
    config: a plugin mix (its ``plan``, if any, may take other arguments or be what it draws by), a difficulty
    filter (it may empty a source), or a plan that refuses the sources (the run says why, a ``top_k`` tie)."""
    mix = build(DATA_MIX, cfg["data"]["mix"])
    plan = getattr(mix, "plan", None)
    if plan is None or not type(mix).__module__.startswith(BUILTIN_MIXES) or cfg["data"]["filter"]["name"] != "none":
        return None
    labels: list[str] = []
    ranks: dict[str, int] = {}
    for i, node in enumerate(cfg["data"]["sources"]):
        source = build(SOURCE, node)
        labels.append(pool_label(source, node, i, labels))
        ranks[labels[-1]] = source.quality_rank
    try:
        counts = plan(dict.fromkeys(labels, 1), ranks)
    except Exception:  # noqa: BLE001 - the run's own mix call says why
        return None
    return {i for i, label in enumerate(labels) if counts.get(label, 0) > 0}


def _unavailable_rewards(cfg: dict[str, Any], read: bool) -> list[tuple[str, str, str]]:
    """(key, what the reward does in the run, why it cannot run here) of each unavailable reward the run calls."""
    out = []
    rl = cfg["rl"]["reward"]
    if cfg["run"]["kind"] == "rl" and (why := reward_unavailable(rl)):
        out.append(("rl.reward", f"{rl['name']!r} (scores every rollout)", why))
    found: tuple[set[str], list[str]] | None = None
    for task, key in EVAL_GRADERS:
        node = cfg["eval"][key]
        why = reward_unavailable(node)
        if not why:
            continue
        tasks, unknown = found = found or eval_tasks(cfg, read)
        if task in tasks:
            out.append((f"eval.{key}", f"{node['name']!r} (grades the {task} records of data.eval_sources)", why))
        elif unknown and not read:
            out.append((f"eval.{key}", f"{node['name']!r} (would grade any {task} records of {', '.join(unknown)}: "
                                       "task auto, and the dry run reads no data to know; a source's `task:` says "
                                       "what it holds)", why))
    return out


def unavailable_rewards(cfg: dict[str, Any], read: bool = True) -> list[tuple[str, str]]:
    """(key, ``what: why``) for each reward a run of ``cfg`` would call and that cannot run on this machine, as
    the reward says (``unavailable()``; ``code`` without bubblewrap): an RL run's ``rl.reward``, and each
    held-out verifier whose task the eval records hold (a math-only evaluation calls no ``eval.code_reward``,
    and needs no sandbox). The run refuses to start (:func:`check_rewards_available`), the dry run marks them NOT
    AVAILABLE HERE, and a sweep refuses to start. ``read``: :func:`eval_tasks`; without it, a verifier the eval
    files of unknown task may need is listed too, saying so."""
    return [(key, f"{what}: {why}") for key, what, why in _unavailable_rewards(cfg, read)]


def parent_unavailable_rewards(cfg: dict[str, Any], read: bool = True) -> list[tuple[str, str]]:
    """:func:`unavailable_rewards` of the ``model.init_from`` starting point a run of ``cfg`` would train
    first (none of its runs completed; and of that one's own, up the chain), keyed ``model.init_from NAME:
    KEY``. The run itself trains it and is refused there (exit 2); the dry run and a sweep say so up front."""
    from klear_lab.starting_point import completed_parent, parent_config
    from klear_lab.tracking import config_hash

    m = cfg["model"]
    if m["name_or_path"] or not m["init_from"]:
        return []
    parent = parent_config(cfg)
    if completed_parent(parent, config_hash(parent))[0] is not None:
        return []
    found = [*unavailable_rewards(parent, read), *parent_unavailable_rewards(parent, read)]
    return [(f"model.init_from {parent['run']['experiment']}: {key}", why) for key, why in found]


def rewards_problem(cfg: dict[str, Any]) -> str | None:
    """Why a run of ``cfg`` cannot start on this machine for a reward it would call (one line; the rewards
    that fail alike grouped), or None."""
    grouped: dict[str, list[str]] = {}
    for key, what, why in _unavailable_rewards(cfg, read=True):
        grouped.setdefault(why, []).append(f"{key} {what}")
    if not grouped:
        return None
    return "; ".join(f"{' and '.join(uses)} cannot run on this machine: {why}" for why, uses in grouped.items())


def check_rewards_available(cfg: dict[str, Any]) -> None:
    """Refuse a run that would call a reward this machine cannot run (``code`` without bubblewrap): before any
    data, model or starting point is built, and before a run directory is written, instead of at its first
    score, after minutes of loading and training.

    Raises:
        ConfigError: naming each such reward's key, what is missing and how to get it (exit code 2).
    """
    problem = rewards_problem(cfg)
    if problem:
        raise ConfigError(f"{problem} Nothing was run or written.")
