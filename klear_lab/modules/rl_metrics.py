"""The RL module's logged values put together: a micro-step's share of its update's, the ranks' merged row, samples."""

from __future__ import annotations

import torch

from klear_lab.data.records import Record
from klear_lab.modules.rl_parts import float_metrics
from klear_lab.rl.data_parallel import merge_rank_metrics, pooled_std
from klear_lab.rl.step_metrics import weight_micro_metrics
from klear_lab.rl.types import AggContext


def micro_step_metrics(clip, metrics: dict, mask: torch.Tensor, ctx: AggContext) -> dict[str, float]:
    """A micro-step's objective ``metrics`` weighted by its share of its update's minibatch (``mask``: the
    micro-step's rows' [n, T] response mask; ``ctx``: the minibatch's counts)."""
    share = float(mask.sum()) / max(ctx.num_tokens, 1.0)  # token-weighted mean of clip metrics
    seq_share = None  # a sequence-level variant's (GSPO) fractions are over sequences
    if getattr(clip, "seq_level", False):
        seq_share = float((mask.sum(-1) > 0).sum()) / max(ctx.num_seqs, 1.0)
    metrics = float_metrics(clip, metrics)
    return weight_micro_metrics(metrics, share, seq_share)


def merge_ranks(metrics: dict[str, float], summed: list[str], slowest: list[str], world: int,
                responses: int) -> dict[str, float]:
    """Every rank logs the same values: its metrics merged with the other ranks'; ``reward/std`` is
    the whole batch's (every rank scores the same number of ``responses``)."""
    import torch.distributed as dist

    parts: list = [None] * world
    dist.all_gather_object(parts, (metrics, summed, slowest))
    merged = merge_rank_metrics(parts)
    merged["reward/std"] = pooled_std([p[0]["reward/mean"] for p in parts], [p[0]["reward/std"] for p in parts],
                                      responses)
    return merged


def sample_rows(records: list[Record], texts: list[str], scores: torch.Tensor, group_size: int) -> list[list]:
    """The step's samples table: per prompt its first response, with the prompt, answer and score
    (``records`` and ``texts``: one per response; ``scores``: [B, group_size])."""
    return [[r.prompt, txt, r.answer, float(s)] for r, txt, s in
            zip(records[::group_size], texts[::group_size], scores[:, 0].tolist())]
