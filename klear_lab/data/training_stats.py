"""The data stats of a run's training records, as the data mix drew them (``data/repeat_factor/<source>``,
``data/mix_share/<source>``, ``data/records``, ``data/correct_frac``...; ``builders.train_and_heldout``)."""

from __future__ import annotations

import warnings
from collections import Counter

from klear_lab.data.mixes.base import share_metrics
from klear_lab.data.records import Record


def repeat_stats(pools: dict[str, list[Record]], records: list[Record], mix: str) -> dict[str, float]:
    """``data/repeat_factor/<source>``: records drawn from a source per distinct record, with a warning when
    a source is repeated to fill its share (a budget larger than a filtered pool is met by repeating it,
    so two arms of one budget can differ in how often they see each example)."""
    owner = {id(r): name for name, recs in pools.items() for r in recs}
    drawn = Counter(owner.get(id(r)) for r in records)
    distinct = Counter(owner.get(i) for i in {id(r) for r in records})
    stats = {}
    for name in pools:
        if drawn[name]:
            stats[f"data/repeat_factor/{name}"] = factor = drawn[name] / distinct[name]
            if factor > 1:
                warnings.warn(f"data.mix {mix!r}: source {name!r} has {len(pools[name])} records after data.filter "
                              f"for a share of {drawn[name]}: each is used {factor:.2f} times on average "
                              f"(data/repeat_factor/{name})", UserWarning, stacklevel=2)
    return stats


def record_stats(records: list[Record]) -> dict[str, float]:
    """What the training records hold: each source's share, their count, and how many responses are known
    to be correct: ``data/correct_frac`` among those whose correctness is known (absent when none is),
    ``data/correct_known_frac`` the share known (a file without a correctness column: 0)."""
    stats = share_metrics(Counter(r.source for r in records))
    stats["data/records"] = float(len(records))
    known = [r.response_correct for r in records if r.response_correct is not None]
    stats["data/correct_known_frac"] = len(known) / max(len(records), 1)
    if known:
        stats["data/correct_frac"] = sum(known) / len(known)
    return stats
