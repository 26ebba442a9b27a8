"""``weighted``: a fixed budget split over sources by given ratios."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from klear_lab.data.mixes.base import check_selection, draw
from klear_lab.data.records import Record
from klear_lab.registry import DATA_MIX


@DATA_MIX.register("weighted")
@dataclass(frozen=True)
class WeightedMix:
    """``budget`` records split over sources in proportion to ``weights``.

    For mixes beyond the paper's even top-K split (Tables 4-5 hold 31,600 examples per setting;
    the final recipe mixes math and code, §4.2). See ``mixes.base`` for sampling when a pool is smaller
    than its share.
    """

    weights: dict[str, float] = field(default_factory=dict)
    """Source name (a file source's ``label``; an unlabelled one is ``file``, then ``file#N`` by its place in
    ``data.sources``) -> ratio >= 0; sources missing or at 0 get no records, and empty weights mean equal ratios.
    Naming a source that is not configured is an error."""
    budget: int = 31600
    """Records drawn in all, split by ``weights`` with largest-remainder rounding so the counts sum to it
    exactly; the paper's 31,600 per top-K setting (paper.md §4.2 Tables 4-5)."""
    select: Literal["random", "kcenter"] = "random"
    """Which records fill a source's share: ``random`` (uniform, without replacement) or ``kcenter`` (K-Center
    Greedy on the prompts, the paper's choice, paper.md §4.2; ``mixes.kcenter``)."""
    kcenter_dim: int = 256
    """Hashed word-unigram and -bigram features per prompt for ``kcenter``'s cosine distance (1-65536);
    unused by ``random``."""

    def __post_init__(self) -> None:
        check_selection(self.select, self.kcenter_dim)
        if bad := {k: v for k, v in self.weights.items() if not v >= 0}:
            raise ValueError(f"weights must be >= 0, got {bad}")
        if self.weights and not sum(self.weights.values()) > 0:
            raise ValueError(f"weights must not all be 0, got {self.weights}")
        if self.budget < 1:
            raise ValueError(f"budget must be >= 1, got {self.budget}")

    def check_sources(self, ranks: Mapping[str, int]) -> None:
        """Raise ValueError for ``weights`` keys that name no source (``ranks``: by source name; ``mixes.base``)."""
        if unknown := sorted(set(self.weights) - set(ranks)):
            raise ValueError(f"weights name unknown sources {unknown}; configured: {sorted(ranks)} (a file source "
                             "is named by its label; an unlabelled one `file`, then `file#N`, N its place in "
                             "data.sources: give each file source a label, and key the weights by it)")

    def plan(self, sizes: Mapping[str, int], ranks: Mapping[str, int]) -> dict[str, int]:
        """Per-source counts proportional to the weights, summing to ``budget``."""
        self.check_sources(dict.fromkeys(sizes, 1))  # by names only: a source's rank plays no part here
        weights = {k: v for k, v in self.weights.items() if v > 0} or dict.fromkeys(sizes, 1.0)
        if not weights:
            raise ValueError("no sources to mix")
        total = sum(weights.values())
        exact = {k: self.budget * w / total for k, w in sorted(weights.items())}
        counts = {k: int(x) for k, x in exact.items()}
        left = self.budget - sum(counts.values())
        for k in sorted(exact, key=lambda k: (counts[k] - exact[k], k))[:left]:
            counts[k] += 1
        return counts

    def __call__(self, pools: dict[str, list[Record]], ranks: dict[str, int], seed: int) -> list[Record]:
        counts = self.plan({k: len(v) for k, v in pools.items()}, ranks)
        return draw(pools, counts, seed, self.select, self.kcenter_dim)
