"""Rewards this machine cannot run (``code`` without bubblewrap), found before a run starts.

A run that would call one is refused before any data, model or starting point is built and before its
run directory is written (:func:`check_rewards_available`), instead of at its first score after minutes
of loading and training; the dry run marks it NOT AVAILABLE HERE and a sweep refuses to start. A reward
says so itself with an optional ``unavailable()`` (:class:`klear_lab.rewards.base.RewardFn`). Like
:mod:`klear_lab.builders`, this reads the config.
"""

from __future__ import annotations

import warnings
from typing import Any

from klear_lab.builders import build, source_nodes, source_path
from klear_lab.config.checks import EVAL_GRADERS
from klear_lab.errors import ConfigError
from klear_lab.registry import REWARD, SOURCE
from klear_lab.rl.rollout.base import preserve_rng


def reward_unavailable(node: dict[str, Any]) -> str | None:
    """Why the reward of config node ``node`` cannot run on this machine, as the reward says (its optional
    ``unavailable()``, e.g. ``code`` without bubblewrap), or None. A reward without that hook is not built."""
    if not hasattr(REWARD.get(node["name"]), "unavailable"):
        return None
    return build(REWARD, node).unavailable()


def eval_tasks(cfg: dict[str, Any], read: bool = True) -> tuple[set[str], list[str]]:
    """The tasks of the held-out records a run of ``cfg`` grades, and the keys of the eval sources whose tasks
    stay unknown. A source that sets its ``task`` (a file's ``task: code``) is not read; a generated world is
    generated (no file is read); a file of ``task: auto`` is read only with ``read`` (the dry run reads no data).
    One that cannot be read here or fails to (its own checks say why) is unknown."""
    tasks: set[str] = set()
    unknown: list[str] = []
    for section, split, i, node in source_nodes(cfg):
        if split != "eval":
            continue
        if node.get("task") not in (None, "auto"):
            tasks.add(node["task"])
            continue
        source = build(SOURCE, node)
        missing = getattr(source, "unavailable", lambda _split: None)(split)
        if missing or (source_path(node, split) is not None and not read):
            unknown.append(f"data.{section}.{i}")
            continue
        try:  # the global RNGs as they were: an eval run reads its data unseeded, after this
            with warnings.catch_warnings(), preserve_rng():  # a repeated uid, say: the run's own read warns
                warnings.simplefilter("ignore")
                tasks.update(r.task for r in source.records(cfg["data"]["world_seed"], split))
        except Exception:  # noqa: BLE001 - a bad row, an unreadable file: the data checks and the run say so
            unknown.append(f"data.{section}.{i}")
    return tasks, unknown


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
