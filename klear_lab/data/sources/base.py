"""What every source provides, and the deterministic train/eval partition of the task world."""

from __future__ import annotations

import hashlib
from typing import Protocol

from klear_lab.data.records import Record

SPLITS = ("train", "eval")


class Source(Protocol):
    """A registered source: ``records(seed, split)`` returns its records for that split.

    ``quality_rank`` (1 = best) orders sources for the ``top_k`` data mix, as the paper's
    Tables 4-5 rank OpenThoughts sources by quality.
    """

    quality_rank: int

    def records(self, seed: int, split: str) -> list[Record]: ...


def is_heldout(prompt: str, eval_share: int = 10) -> bool:
    """1 in ``eval_share`` prompts belong to the eval split, by a stable hash of the prompt text.

    The partition does not depend on seeds or sources, so no eval prompt is ever trained on.
    """
    digest = hashlib.blake2b(prompt.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % eval_share == 0
