"""Data-parallel RL (DDP): how ranks split a rollout batch and still take the same optimizer updates.

Each of the ``world`` ranks generates, scores and filters its own share of the step's prompts. The
group filter keeps a different number of groups on each rank, yet DDP all-reduces gradients once
per update, so every rank must join every update. The ranks therefore cut the kept groups of all
ranks into global minibatches of ``minibatch_prompts`` (as on one device) and each takes its own
part of each (a part may be empty: the rank then contributes a zero gradient). The loss is
normalised by counts summed over the ranks and multiplied by ``world``, so DDP's gradient mean is
the gradient of the whole global minibatch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch


def rank_prompts(batch: list, rank: int, world: int) -> list:
    """This rank's share of a step's prompts: every ``world``-th, starting at ``rank``."""
    return batch[rank::world]


def first_survivors(kept_by_rank: Sequence[Sequence[int]], cap: int) -> list[list[int]]:
    """Each rank's kept groups among the first ``cap`` survivors of the whole step in generation order
    (rank ``r``'s local prompt ``j`` is the step's prompt ``j * world + r``, :func:`rank_prompts`)."""
    world = len(kept_by_rank)
    order = sorted((j * world + r, r, j) for r, kept in enumerate(kept_by_rank) for j in kept)
    out: list[list[int]] = [[] for _ in range(world)]
    for _, r, j in order[:cap]:
        out[r].append(j)
    return out


def rank_minibatches(kept: list[int], kept_per_rank: Sequence[int], rank: int, minibatch_prompts: int
                     ) -> list[list[int]]:
    """This rank's kept groups in each optimizer update of one epoch.

    The ranks' kept groups are interleaved (each rank's first, then each rank's second, ...) and cut
    into global minibatches of ``minibatch_prompts``; a rank takes its own groups of each. Every rank
    gets the same number of updates, ``ceil(sum(kept_per_rank) / minibatch_prompts)``, some possibly
    empty for it. With one rank these are consecutive chunks of ``kept``.

    Args:
        kept: this rank's kept group indices. kept_per_rank: every rank's count (``kept_per_rank[rank]
            == len(kept)``). minibatch_prompts: groups per update, over all ranks.
    """
    order = [(r, i) for i in range(max(kept_per_rank, default=0)) for r, n in enumerate(kept_per_rank) if i < n]
    chunks = [order[s: s + minibatch_prompts] for s in range(0, len(order), minibatch_prompts)]
    return [[kept[i] for r, i in chunk if r == rank] for chunk in chunks]


def merge_rank_metrics(per_rank: Sequence[tuple[dict[str, float], Iterable[str], Iterable[str]]]
                       ) -> dict[str, float]:
    """One rank-independent metric dict from every rank's ``(metrics, keys to sum, keys to max)``.

    Summed keys are those whose rank values add up to the global value: a loss term that each rank
    computed with global denominators, a clip statistic weighted by the rank's share of the global
    tokens, a throughput. Maxed keys are times every rank waits for. Of the rest, ``*_max`` keys take
    the maximum, ``*_min`` the minimum, and others the mean over the ranks that logged them (a rank
    without a kept group logs no clip metric).
    """
    summed = {k for _, keys, _ in per_rank for k in keys}
    maxed = {k for _, _, keys in per_rank for k in keys}
    merged: dict[str, float] = {}
    for key in dict.fromkeys(k for metrics, _, _ in per_rank for k in metrics):
        values = [metrics[key] for metrics, _, _ in per_rank if key in metrics]
        if key in summed:
            merged[key] = sum(values)
        elif key in maxed or key.endswith("_max"):
            merged[key] = max(values)
        elif key.endswith("_min"):
            merged[key] = min(values)
        else:
            merged[key] = sum(values) / len(values)
    return merged


def pooled_std(means: Sequence[float], stds: Sequence[float], n: int) -> float:
    """The sample standard deviation of the union of groups of ``n`` values each, from each group's mean
    and sample standard deviation: (sum of within-group squares + between-group squares) / (N - 1)."""
    total = n * len(means)
    if total < 2:
        return 0.0
    mean = sum(means) / len(means)
    squares = sum((n - 1) * s * s + n * (m - mean) ** 2 for m, s in zip(means, stds))
    return (squares / (total - 1)) ** 0.5


def zero_loss(model: torch.nn.Module) -> torch.Tensor:
    """A loss of 0 whose backward gives every trainable parameter a zero gradient: how a rank with
    nothing to learn from in an update still joins DDP's gradient all-reduce."""
    return torch.stack([p.sum() for p in model.parameters() if p.requires_grad]).sum() * 0.0


def weights_fingerprint(model: torch.nn.Module) -> torch.Tensor:
    """[2] float64: the sum and the sum of squares of every parameter. DDP ranks that took the same
    updates hold bit-identical weights, so equal fingerprints are expected; a missed all-reduce shows."""
    total = square = 0.0
    for p in model.parameters():  # one float64 copy at a time: an 8B model's would not fit at once
        p64 = p.detach().double()
        total, square = total + p64.sum(), square + (p64 * p64).sum()
    return torch.stack([torch.as_tensor(total), torch.as_tensor(square)])
