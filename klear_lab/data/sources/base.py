"""What every source provides, and the deterministic train/eval partition of the task world."""

from __future__ import annotations

import hashlib
from typing import Protocol

from klear_lab.data.records import Record

SPLITS = ("train", "eval")


class Source(Protocol):
    """A registered source: ``records(seed, split)`` returns its records for that split.

    ``quality_rank`` (1 = best) orders sources for the ``top_k`` data mix, as the paper's
    Tables 4-5 rank OpenThoughts sources by quality. An optional ``task`` (``math`` or ``code``; a class
    attribute of the embedded worlds, a field of ``file``) says that every record has that task, so the
    up-front ``rl.reward`` check (``reward_checks.source_tasks``) need not build the records to know it.
    """

    quality_rank: int

    def records(self, seed: int, split: str) -> list[Record]: ...


def is_heldout(prompt: str, eval_share: int = 10) -> bool:
    """1 in ``eval_share`` prompts belong to the eval split, by a stable hash of the prompt text.

    The partition does not depend on seeds or sources, so no eval prompt is ever trained on.
    """
    digest = hashlib.blake2b(prompt.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % eval_share == 0


def check_quality_rank(src) -> None:
    """``quality_rank`` counts from 1 (the best): a 0 or negative rank would sort ahead of the best source."""
    rank = src.quality_rank
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"quality_rank must be a whole number >= 1 (1 = the best source), got {rank!r}")


def check_teacher_fields(src, styles: tuple[str, ...], levels: tuple[int, ...]) -> None:
    """Shared ``__post_init__`` checks of the embedded teacher sources (counts, style, error rate, levels,
    quality rank)."""
    check_quality_rank(src)
    for field in ("n_prompts", "responses_per_prompt"):
        if getattr(src, field) < 1:
            raise ValueError(f"{field} must be >= 1, got {getattr(src, field)}")
    if src.style not in styles:
        raise ValueError(f"style must be one of {styles}, got {src.style!r}")
    if not 0.0 <= src.teacher_error <= 1.0:
        raise ValueError(f"teacher_error must be in [0, 1], got {src.teacher_error}")
    if len(src.levels) != len(src.level_weights):
        raise ValueError("levels and level_weights must have the same length")
    for level in src.levels:
        if level not in levels:
            raise ValueError(f"levels must be among {levels}, got {level}")
    if any(w < 0 for w in src.level_weights) or not sum(src.level_weights) > 0:
        raise ValueError(f"level_weights must be >= 0 with a positive sum, got {list(src.level_weights)}")


class SplitExhausted(ValueError):
    """A generated source asked for more distinct prompts than its split holds (its message starts with the
    key at fault, ``n_prompts: ...``; the builder prefixes the source's config key)."""


MAX_MISSES = 100_000
"""Draws in a row without a new prompt after which a split counts as exhausted (a new prompt is then rarer
than 1 in 100,000 draws: the split is as good as all drawn)."""


def distinct_prompts(rng, n: int, split: str, draw):
    """Yield ``(index, level, item, prompt)`` for ``n`` distinct prompts of ``split``.

    ``draw(rng) -> (level, item, prompt)`` makes one candidate; candidates on the other side of
    the held-out partition, or repeated, are skipped.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    seen: set[str] = set()
    misses = 0  # draws in a row that gave no new prompt
    while len(seen) < n:
        level, item, prompt = draw(rng)
        if prompt in seen or is_heldout(prompt) != (split == "eval"):
            misses += 1
            if misses >= MAX_MISSES:  # the split holds fewer prompts than asked: it looped for ever
                raise SplitExhausted(f"n_prompts: {n} distinct {split} prompts asked, but {MAX_MISSES:,} draws "
                                     f"in a row after the {len(seen)}th gave none new: this source's {split} "
                                     "split (its levels) holds about that many; ask for fewer")
            continue
        misses = 0
        seen.add(prompt)
        yield len(seen) - 1, level, item, prompt
