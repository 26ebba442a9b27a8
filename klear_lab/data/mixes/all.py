"""``all``: every record of every source once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from klear_lab.data.mixes.base import draw
from klear_lab.data.records import Record
from klear_lab.registry import DATA_MIX


@DATA_MIX.register("all")
@dataclass(frozen=True)
class AllMix:
    """Union of all sources, shuffled (the paper's final SFT set, §4.2: all sources, no budget)."""

    def plan(self, sizes: Mapping[str, int], ranks: Mapping[str, int]) -> dict[str, int]:
        """Every source contributes all its records."""
        return dict(sizes)

    def __call__(self, pools: dict[str, list[Record]], ranks: dict[str, int], seed: int) -> list[Record]:
        return draw(pools, self.plan({k: len(v) for k, v in pools.items()}, ranks), seed)
