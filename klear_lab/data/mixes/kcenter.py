"""K-Center Greedy selection: the records of a pool that cover its prompts best.

Paper §4.2 (Tables 2, 4 and 5) draws its fixed-size SFT subsets with K-Center Greedy (the core-set
rule of Sener & Savarese, ICLR 2018): start from one point, then keep adding the point farthest
from every point chosen so far, so a budget smaller than the pool spreads over the whole pool
instead of over its most common kinds of problem. The paper does not say which embedding it
measures distance in; here a prompt is its hashed word unigrams and bigrams (``dim`` buckets,
signed counts) and distance is cosine, which needs no model and gives the same choice on every
machine (integer dot products, exact in float32; IEEE float64 cosines). Cost: one pass over the pool
per record chosen (~17-21 ms per pick for a pool of 100,000 at 256 features on one core here;
``scripts/bench_kcenter.py``). As K-Center Greedy does, it takes outliers first (very short or
empty prompts lie far from everything).

Prompts with the same words (case and punctuation aside: ``x+y`` and ``x-y`` are one) are one point,
as several teacher responses to one problem are: once every distinct point has been chosen, the rest
of the count is drawn at random from the records left.
"""

from __future__ import annotations

import random
import re
import zlib

import numpy as np
import torch

from klear_lab.data.records import Record

WORD = re.compile(r"\w+")
_M32 = np.uint64(0xFFFFFFFF)


def _fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's finaliser on uint64 arrays of 32-bit values: every output bit depends on every input bit."""
    h = h ^ (h >> np.uint64(16))
    h = (h * np.uint64(0x85EBCA6B)) & _M32
    h = h ^ (h >> np.uint64(13))
    h = (h * np.uint64(0xC2B2AE35)) & _M32
    return h ^ (h >> np.uint64(16))


def prompt_features(prompts: list[str], dim: int) -> torch.Tensor:
    """(n, dim) float32 of small integers: signed hashed counts of each prompt's word unigrams and bigrams.

    Counts are clipped to ``±sqrt(2**24 / dim)`` so that every dot product of two rows is an integer
    below 2**24, exact in float32 whatever the summation order: the selection is then the same on
    every machine and thread count, not only in distribution.
    """
    vocab: dict[str, int] = {}
    ids: list[int] = []
    lengths = np.zeros(len(prompts), dtype=np.int64)
    for row, text in enumerate(prompts):
        words = WORD.findall(text.lower())
        lengths[row] = len(words)
        ids.extend(vocab.setdefault(w, len(vocab)) for w in words)
    word_hash = np.array([zlib.crc32(w.encode()) for w in vocab], dtype=np.uint64)  # stable, unlike hash()
    h = word_hash[np.array(ids, dtype=np.int64)]                                     # (T,) one per word
    rows = np.repeat(np.arange(len(prompts)), lengths)                               # (T,)
    same = rows[1:] == rows[:-1]                                                     # (T-1,) bigram in one prompt
    # (B,) bigram hashes, mixed whole: two words sharing a bucket must not share their bigrams' buckets too
    pairs = _fmix32((h[:-1][same] * np.uint64(0x01000193) + h[1:][same]) & _M32)
    grams, gram_rows = np.concatenate([h, pairs]), np.concatenate([rows, rows[:-1][same]])
    signs = np.where((grams >> np.uint64(31)) & np.uint64(1), 1.0, -1.0)
    cells = gram_rows * dim + (grams % np.uint64(dim)).astype(np.int64)
    counts = np.bincount(cells, weights=signs, minlength=len(prompts) * dim)
    bound = int((2**24 / dim) ** 0.5)
    return torch.from_numpy(np.clip(counts, -bound, bound).reshape(len(prompts), dim)).float()


def kcenter_order(features: torch.Tensor, n: int, first: int) -> list[int]:
    """Indices of ``n`` rows chosen greedily, each the least similar (cosine) to those before it.

    ``first`` is chosen first. Stops early, with fewer than ``n``, once every row left points the same
    way as a chosen one (a repeated prompt). Assumes integer ``features`` (``prompt_features``).
    """
    # features: (N, D); nearest: (N,) cosine similarity of each row to its most similar chosen row
    sq = (features * features).sum(1).double()                               # (N,) exact integers
    nearest = torch.full_like(sq, -2.0)
    chosen, pick = [], first
    while len(chosen) < n:
        chosen.append(pick)
        norms = torch.sqrt(sq * sq[pick])                                    # (N,)
        dots = torch.mv(features, features[pick]).double()                   # (N,) exact
        sim = torch.where(norms > 0, dots / norms.clamp(min=1.0), (sq == sq[pick]).double())
        torch.maximum(nearest, sim, out=nearest)
        nearest[pick] = 2.0  # never again
        pick = int(nearest.argmin())
        if not nearest[pick] < 1.0:
            break
    return chosen


def kcenter_take(pool: list[Record], n: int, rng: random.Random, dim: int) -> list[Record]:
    """``n`` records of ``pool`` by K-Center Greedy on their prompts (``n`` <= ``len(pool)``).

    The pool is shuffled first (by ``rng``), so the first center and which of a repeated prompt's
    records stands for it are random, not the file's first.
    """
    if n <= 0:
        return []
    shuffled = rng.sample(pool, len(pool))
    order = kcenter_order(prompt_features([r.prompt for r in shuffled], dim), n, first=0)
    taken = set(order)
    order += [i for i in range(len(shuffled)) if i not in taken][: n - len(order)]  # repeats, in shuffled order
    return [shuffled[i] for i in order]
