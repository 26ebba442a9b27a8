"""One call that probes every RL component a run will call (registers nothing): what ``--dry-run`` and a sweep's
checks run before any model loads, as ``stages.rl.prepare_rl`` does with each probe."""

from __future__ import annotations

from typing import Any


def probe_rl_components(rl: dict[str, Any]) -> None:
    """Raise a ``ComponentError`` (exit 2) for an RL component (a plugin's, usually) the run would call and fail
    on, or train wrongly with, after its model loaded and its first rollouts ran: as ``prepare_rl`` does."""
    from klear_lab.builders import build
    from klear_lab.registry import ADVANTAGE, AGGREGATION, CLIP, GROUP_FILTER, ROLLOUT
    from klear_lab.rl.advantages.base import probe_advantage
    from klear_lab.rl.aggregation.base import probe_aggregation
    from klear_lab.rl.clip.base import probe_clip
    from klear_lab.rl.group_filters.base import probe_group_filter
    from klear_lab.rl.rollout.base import check_rollout_engine

    probe_clip(build(CLIP, rl["clip"]), "rl.clip")
    probe_advantage(build(ADVANTAGE, rl["advantage"]), "rl.advantage")
    probe_aggregation(build(AGGREGATION, rl["aggregation"]), "rl.aggregation")
    probe_group_filter(build(GROUP_FILTER, rl["group_filter"]), "rl.group_filter")
    check_rollout_engine(build(ROLLOUT, rl["rollout"]), "rl.rollout")
