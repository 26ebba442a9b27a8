"""``top_k``: the K best sources by quality rank under a fixed total budget."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from klear_lab.data.mixes.base import by_rank, check_selection, draw, split_evenly
from klear_lab.data.records import Record
from klear_lab.registry import DATA_MIX


@DATA_MIX.register("top_k")
@dataclass(frozen=True)
class TopKMix:
    """The ``k`` best sources (quality_rank 1 = best), ``budget`` records split evenly over them.

    Paper Tables 4-5 (math / code SFT, Top1...Top10): the total stays at 31,600 examples whatever K, so
    adding lower-quality sources dilutes the best ones. See ``mixes.base`` for sampling when a pool is
    smaller than its share.
    """

    k: int | None = 1
    """How many sources to keep, by ``quality_rank``: the paper's TopK (paper.md §4.2 Tables 4-5); 0 or None
    keeps all, more than are configured is an error, and so is a cut between sources of equal rank."""
    budget: int = 31600
    """Records drawn in all, split evenly over the kept sources (the remainder one each to the best); the
    paper's 31,600 per setting (paper.md §4.2 Tables 4-5)."""
    select: Literal["random", "kcenter"] = "random"
    """Which records fill a source's share: ``random`` (uniform, without replacement) or ``kcenter`` (K-Center
    Greedy on the prompts, the paper's choice, paper.md §4.2; ``mixes.kcenter``)."""
    kcenter_dim: int = 256
    """Hashed word-unigram and -bigram features per prompt for ``kcenter``'s cosine distance (1-65536);
    unused by ``random``."""

    def __post_init__(self) -> None:
        check_selection(self.select, self.kcenter_dim)
        if self.k is not None and self.k < 0:
            raise ValueError(f"k must be >= 0 (0 or None = all sources), got {self.k}")
        if self.budget < 1:
            raise ValueError(f"budget must be >= 1, got {self.budget}")

    def check_sources(self, ranks: Mapping[str, int]) -> None:
        """Raise ValueError for a ``k`` the sources' names and ranks alone refuse (``mixes.base``): more than
        there are, or a cut between sources of one rank."""
        ranked = by_rank(list(ranks), ranks)
        if self.k and self.k > len(ranked):
            raise ValueError(f"k={self.k} but only {len(ranked)} sources are configured: {ranked}")
        if self.k and self.k < len(ranked) and ranks[ranked[self.k - 1]] == ranks[ranked[self.k]]:
            tied = [name for name in ranked if ranks[name] == ranks[ranked[self.k]]]
            raise ValueError(f"k={self.k} would keep some and drop others of the sources tied at quality_rank "
                             f"{ranks[ranked[self.k]]} ({', '.join(tied)}), by their names: give each source a "
                             "distinct quality_rank (a file source's default is 1)")

    def plan(self, sizes: Mapping[str, int], ranks: Mapping[str, int]) -> dict[str, int]:
        """Per-source counts: the top ``k`` sources by rank share ``budget`` evenly (best first)."""
        ranked = by_rank(list(sizes), ranks)
        self.check_sources({name: ranks[name] for name in ranked})
        return split_evenly(self.budget, ranked[: self.k or None])

    def __call__(self, pools: dict[str, list[Record]], ranks: dict[str, int], seed: int) -> list[Record]:
        counts = self.plan({k: len(v) for k, v in pools.items()}, ranks)
        return draw(pools, counts, seed, self.select, self.kcenter_dim)
