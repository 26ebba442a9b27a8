"""N-gram decontamination: training records whose prompt shares a word n-gram with a held-out prompt are
dropped before the difficulty filter and the data mix (``data.decontaminate_ngram``; the paper removes
prompts with a 9-gram test-set overlap from its SFT and RL data, paper.md §6).

How prompts are compared:

- Words: the prompt lowercased, split on every character that is not a letter or a digit (Unicode ones
  too; ``_`` splits). ``What is $x^2$?`` and ``what IS x 2`` are the same four words; punctuation, LaTeX
  markup and whitespace do not tell prompts apart. A run of CJK characters is one word.
- A training prompt is dropped when its words are exactly a held-out prompt's (an exact duplicate is always
  caught, whatever its length), or when one of its runs of ``n`` words is one of a held-out prompt's. A
  prompt shorter than ``n`` words has no such run: a short held-out prompt quoted inside a longer training
  prompt is not caught. A prompt without any word is compared with nothing.
- A held-out source's prompt template is not matched: a run found in at least half of the distinct prompts
  of one held-out source that has at least :data:`TEMPLATE_MIN_PROMPTS` of them is an instruction, not a
  problem (``You are an expert Python programmer. You will be given a question ...`` opens every code prompt
  of the paper's RL data, its training files' and LiveCodeBench's alike), and would drop every training
  record that carries it. Runs that overlap such a run are left out too: one reaching from the instruction
  into a problem's first word ("... passes all tests you") would otherwise drop every training problem
  that begins with that word after the same instruction.

Cost: the held-out runs go into one set of word tuples (exact, not hashed to integers, so no collision can
drop a record on one process of a run and not on another); each distinct training prompt is split once and
its runs looked up in that set (100k prompts of ~80 words: about 4 s on one core).
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import accumulate

from klear_lab.data.records import Record
from klear_lab.errors import ConfigError, DataError

KEY = "data.decontaminate_ngram"
WORD = re.compile(r"[^\W_]+")
"""A word: a run of letters and digits."""
TEMPLATE_MIN_PROMPTS = 4
"""Distinct prompts a held-out source needs before runs shared by half of them count as its template."""


def prompt_words(prompt: str) -> tuple[str, ...]:
    """The prompt's words, as they are compared (lowercased; split on whatever is not a letter or digit)."""
    return tuple(WORD.findall(prompt.lower()))


def windows(words: tuple[str, ...], n: int) -> Iterator[tuple[str, ...]]:
    """Every run of ``n`` consecutive words (none when there are fewer): the n-grams."""
    return zip(*(words[i:] for i in range(n)))


@dataclass(frozen=True)
class HeldOutIndex:
    """What a training prompt is compared with: the held-out prompts' runs of ``n`` words (those of their
    templates left out) and each held-out prompt's whole word tuple."""

    n: int
    ngrams: frozenset[tuple[str, ...]]
    whole: frozenset[tuple[str, ...]]

    def matches(self, prompt: str) -> bool:
        words = prompt_words(prompt)
        if not words:
            return False
        return words in self.whole or not self.ngrams.isdisjoint(windows(words, self.n))


def heldout_index(eval_records: Iterable[Record], n: int) -> HeldOutIndex:
    """The :class:`HeldOutIndex` of ``eval_records``: each source's distinct prompts, its template left out."""
    by_source: dict[str, set[tuple[str, ...]]] = {}
    for r in eval_records:
        by_source.setdefault(r.source, set()).add(prompt_words(r.prompt))
    ngrams: set[tuple[str, ...]] = set()
    for prompts in by_source.values():
        counts = Counter(g for words in prompts for g in set(windows(words, n)))
        template = template_ngrams(counts, len(prompts))
        for words in prompts:
            ngrams.update(content_windows(words, n, template))
    whole = {words for prompts in by_source.values() for words in prompts if words}
    return HeldOutIndex(n, frozenset(ngrams), frozenset(whole))


def template_ngrams(counts: Counter, prompts: int) -> set[tuple[str, ...]]:
    """Runs found in at least half of a source's ``prompts`` distinct prompts (none below
    :data:`TEMPLATE_MIN_PROMPTS`): the instruction every problem of the source repeats."""
    if prompts < TEMPLATE_MIN_PROMPTS:
        return set()
    return {g for g, c in counts.items() if 2 * c >= prompts}


def content_windows(words: tuple[str, ...], n: int, template: set[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """The runs of ``n`` words of a prompt that share no word position with a run of its ``template``."""
    runs = list(windows(words, n))
    if not template:
        return runs
    starts = [i for i, g in enumerate(runs) if g in template]
    if not starts:
        return runs
    in_template = [0] * len(words)  # its running sum: template positions before each word
    for i in starts:
        in_template[i:i + n] = [1] * n
    covered = list(accumulate(in_template, initial=0))
    return [g for i, g in enumerate(runs) if covered[i + n] == covered[i]]


def contaminated(records: list[Record], index: HeldOutIndex) -> list[bool]:
    """Whether each record's prompt matches ``index``; a prompt repeated over records (SFT data holds up to
    16 responses per prompt) is split once."""
    seen: dict[str, bool] = {}
    out = []
    for r in records:
        hit = seen.get(r.prompt)
        if hit is None:
            hit = seen[r.prompt] = index.matches(r.prompt)
        out.append(hit)
    return out


def decontaminated_pools(pools: dict[str, list[Record]], eval_records: list[Record], n: int,
                         ) -> tuple[dict[str, list[Record]], dict[str, float]]:
    """Each pool without its records that match a held-out prompt (:func:`heldout_index`), and the data stats
    ``data/decontam_dropped`` (records dropped) and ``data/decontam_dropped_from/<source>``; one line on
    stderr says how many and which first.

    Raises:
        ConfigError: ``n`` is negative.
        DataError: every record of a source matched (the held-out file read as training data, say).
    """
    if n < 0:
        raise ConfigError(f"{KEY} must be 0 (off) or a word count (the paper's: 9), got {n}")
    index = heldout_index(eval_records, n)
    kept: dict[str, list[Record]] = {}
    dropped: dict[str, list[Record]] = {}
    for name, recs in pools.items():
        flags = contaminated(recs, index)
        kept[name] = [r for r, hit in zip(recs, flags) if not hit]
        dropped[name] = [r for r, hit in zip(recs, flags) if hit]
        if recs and not kept[name]:
            raise DataError(f"{KEY}={n}: all {len(recs)} training records of source {name!r} share a {n}-word "
                            "run with a held-out prompt of data.eval_sources or repeat one (the first: "
                            f"{recs[0].uid!r}); is it the held-out file itself, or do both carry one prompt template "
                            f"(one is recognised from {TEMPLATE_MIN_PROMPTS} held-out prompts)? {KEY}=0 keeps them")
    report(dropped, sum(map(len, pools.values())), n)
    stats = {f"data/decontam_dropped_from/{name}": float(len(recs)) for name, recs in dropped.items()}
    return kept, {"data/decontam_dropped": float(sum(map(len, dropped.values()))), **stats}


def report(dropped: dict[str, list[Record]], total: int, n: int) -> None:
    """One line on stderr: the records dropped, per source where any were, and the first of them."""
    count = sum(map(len, dropped.values()))
    line = (f"{KEY}={n}: dropped {count} of {total} training records that share a {n}-word run with a held-out "
            "prompt or repeat one")
    if count:
        first = next(r for recs in dropped.values() for r in recs)
        per_source = ", ".join(f"{name}: {len(recs)}" for name, recs in dropped.items() if recs)
        line += f" ({per_source}; the first: {first.uid!r} of {first.source!r})"
    print(line, file=sys.stderr)
