"""N-gram decontamination: training records whose prompt shares a word n-gram with a held-out prompt are
dropped before the difficulty filter and the data mix (``data.decontaminate_ngram``; the paper removes
prompts with a 9-gram test-set overlap from its SFT and RL data, paper.md §6).

How prompts are compared:

- Words: the prompt lowercased, cut into runs of letters and digits (Unicode ones too; ``_`` splits) and
  the arithmetic operators ``+ - * / = < > ^ ! %``, one word each (``− × ÷ ≤ ≥ ≠ ±`` read as their ASCII
  spelling first). ``What is $x^2$?`` and ``what IS x ^ 2`` are the same four words: other punctuation,
  LaTeX markup and whitespace do not tell prompts apart, but ``71+43`` and ``71-43`` are different
  problems. A run of CJK characters is one word.
- A training prompt is dropped when one of its runs of ``n`` words is one of a held-out prompt's, or when
  its words are exactly those of a held-out prompt shorter than ``n`` words (only then: ``Find x.`` opens
  many other problems). A prompt without any word is compared with nothing.
- Boilerplate is not matched: a run found in :data:`SHARED_BY` or more distinct held-out prompts (of any
  source) belongs to no single test problem. It is an instruction (``You are an expert Python programmer.
  You will be given a question ...`` opens every code prompt of the paper's RL data, its training files'
  and LiveCodeBench's alike; LiveCodeBench's AtCoder and LeetCode problems each carry their own) or a
  stock phrase (``where m and n are relatively prime positive integers``), and would drop every training
  record that carries it. Runs that overlap such a run are left out too: one reaching from the instruction
  into a problem's first word ("... passes all tests you") would otherwise drop every training problem
  that begins with that word after the same instruction. A held-out prompt made of boilerplate only (one
  of several that differ in their numbers, say) is looked for whole, in order, inside training prompts.
- What this misses: one problem held out 3 times or more under different instructions counts as
  boilerplate itself, so only a copy holding one of its prompts whole is caught; a problem whose numbers
  were changed is not caught at all.

Cost: the held-out runs go into one set of word tuples (exact, not hashed to integers, so no collision can
drop a record on one process of a run and not on another); each distinct training prompt is split once and
its runs looked up in that set, and in the few boilerplate-only prompts' beginnings (100k prompts of ~80
words against 1,000 held-out prompts: about 4 s on one core). A process pays it once per pool: which of a pool's
distinct prompts matched is remembered (:data:`MEMO_SIZE` pools), keyed by ``n`` and digests of the pool's and
the held-out prompts, so a run whose starting point's records were checked first (``records_digests``, a
resumed run) does not compare them again.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from itertools import accumulate

from klear_lab.data.records import Record, file_and_row
from klear_lab.errors import ConfigError, DataError

KEY = "data.decontaminate_ngram"
WORD = re.compile(r"[^\W_]+|[-+*/=<>^!%]")
"""A word: a run of letters and digits, or one arithmetic operator (after :data:`OPERATORS`)."""
OPERATORS = str.maketrans({"−": "-", "–": "-", "×": "*", "÷": "/", "≤": "<=", "≥": ">=", "≠": "!=", "±": "+-"})
"""Unicode operators as their ASCII spelling: a copy typed with ``<=`` is the problem written with ``≤``."""
SHARED_BY = 3
"""Distinct held-out prompts (of any source) a run must be found in to count as boilerplate, not a problem's."""
MEMO_SIZE = 32
"""Pools whose matches a process remembers (:func:`contaminated`), the least recently used forgotten first."""
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")
"""Where a process's rank is set before Lightning's trainer sets its own, the first one present read (Lightning's
order, ``lightning.fabric.utilities.rank_zero._get_rank``): torchrun's ``RANK`` is global, the ``LOCAL_RANK`` of
Lightning's own launcher counts within a node (see :func:`global_rank_zero`), SLURM's and LSF's are global."""
NODE_VARIABLES = ("NODE_RANK", "GROUP_RANK", "SLURM_NODEID")
"""Where a node's rank is set: Lightning's launcher's, torchrun's, SLURM's (a job script that exports
``LOCAL_RANK=$SLURM_LOCALID`` would otherwise make each node's first task say it)."""
_memo_lock = threading.Lock()
_matched: OrderedDict[tuple[int, bytes, bytes], bytes] = OrderedDict()
"""(n, held-out prompts' digest, a pool's distinct prompts' digest) -> one byte per distinct prompt: 1 matched."""


def prompt_words(prompt: str) -> tuple[str, ...]:
    """The prompt's words, as they are compared (lowercased; letter-and-digit runs and operators)."""
    return tuple(WORD.findall(prompt.lower().translate(OPERATORS)))


def windows(words: tuple[str, ...], n: int) -> Iterator[tuple[str, ...]]:
    """Every run of ``n`` consecutive words (none when there are fewer): the n-grams."""
    return zip(*(words[i:] for i in range(n)))


@dataclass(frozen=True, eq=False)
class HeldOutIndex:
    """What a training prompt is compared with: the held-out prompts' runs of ``n`` words (boilerplate left
    out); the word tuples of those made of boilerplate only, under their first ``n`` words (a text holding
    another prompt whole holds its runs, so only these are looked for whole); and those shorter than ``n``
    words, matched as exact duplicates only (a short problem, ``Find x.``, opens many others)."""

    n: int
    ngrams: frozenset[tuple[str, ...]]
    starts: dict[tuple[str, ...], tuple[tuple[str, ...], ...]]  # first n words -> the held-out prompts' words
    short: frozenset[tuple[str, ...]]

    def matches(self, prompt: str) -> bool:
        words = prompt_words(prompt)
        return bool(words) and (words in self.short or not self.ngrams.isdisjoint(windows(words, self.n))
                                or self.quotes(words))

    def quotes(self, words: tuple[str, ...]) -> bool:
        """Whether ``words`` hold a boilerplate-only held-out prompt's words whole, in order."""
        if not self.starts:
            return False
        for i, run in enumerate(windows(words, self.n)):
            if any(words[i:i + len(held)] == held for held in self.starts.get(run, ())):
                return True
        return False


def heldout_index(eval_records: Iterable[Record], n: int) -> HeldOutIndex:
    """The :class:`HeldOutIndex` of ``eval_records``' distinct prompts, boilerplate left out."""
    prompts = {prompt_words(r.prompt) for r in eval_records} - {()}
    template = boilerplate(Counter(g for words in prompts for g in set(windows(words, n))))
    ngrams: set[tuple[str, ...]] = set()
    starts: dict[tuple[str, ...], set[tuple[str, ...]]] = {}
    for words in prompts:
        if content := content_windows(words, n, template):
            ngrams.update(content)  # a text that holds the prompt whole holds these runs too
        elif len(words) >= n:  # boilerplate only: looked for whole
            starts.setdefault(words[:n], set()).add(words)
    short = frozenset(words for words in prompts if len(words) < n)
    return HeldOutIndex(n, frozenset(ngrams), {k: tuple(v) for k, v in starts.items()}, short)


def boilerplate(counts: Counter) -> set[tuple[str, ...]]:
    """The runs found in :data:`SHARED_BY` or more distinct held-out prompts (``counts``), of any source: a
    stock phrase spread over two benchmarks is one still."""
    return {g for g, c in counts.items() if c >= SHARED_BY}


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


def contaminated(records: list[Record], n: int, eval_key: bytes, index: Callable[[], HeldOutIndex]) -> list[bool]:
    """Whether each record's prompt matches ``index()``, the held-out prompts' (digest ``eval_key``) at ``n``
    words. A prompt repeated over records (SFT data holds up to 16 responses per prompt) is split once, and a
    pool of the same distinct prompts once per process (:data:`MEMO_SIZE`): ``index`` is called only then."""
    prompts = list(dict.fromkeys(r.prompt for r in records))
    key = (n, eval_key, prompts_digest(prompts))
    with _memo_lock:  # an API caller's threads
        flags = _matched.get(key)
        if flags is not None:
            _matched.move_to_end(key)
    if flags is None:
        flags = matched_flags(prompts, index())
        with _memo_lock:
            _matched[key] = flags
            while len(_matched) > max(MEMO_SIZE, 0):  # 0: nothing remembered
                _matched.popitem(last=False)
    hits = {prompt for prompt, hit in zip(prompts, flags) if hit}
    return [r.prompt in hits for r in records]


def matched_flags(prompts: list[str], index: HeldOutIndex) -> bytes:
    """One byte per prompt: 1 where it matches ``index``."""
    return bytes(index.matches(prompt) for prompt in prompts)


def prompts_digest(prompts: Iterable[str]) -> bytes:
    """An exact key of ``prompts``, in order: a hash of each one's UTF-8 text after its length."""
    h = hashlib.blake2b(digest_size=32)
    for prompt in prompts:
        text = prompt.encode("utf-8", "surrogatepass")
        h.update(len(text).to_bytes(8, "little"))
        h.update(text)
    return h.digest()


def decontaminated_pools(pools: dict[str, list[Record]], eval_records: list[Record], n: int, quiet: bool = False,
                         where: Mapping[str, str] | None = None) -> tuple[dict[str, list[Record]], dict[str, float]]:
    """Each pool without its records that match a held-out prompt (:func:`heldout_index`), and the data stats
    ``data/decontam_dropped`` (records dropped) and ``data/decontam_dropped_from/<source>``; one line on
    stderr says how many and which first, unless ``quiet`` or in a process other than a run's global rank 0.
    ``where``: each pool's config key and file (``data.sources.0 (data/a.jsonl)``), for the error below.

    Raises:
        ConfigError: ``n`` is negative.
        DataError: every record of a source matched (the held-out file read as training data, say).
    """
    if n < 0:
        raise ConfigError(f"{KEY} must be 0 (off) or a word count (the paper's: 9), got {n}")
    index = cache(lambda: heldout_index(eval_records, n))  # built where a pool is not remembered
    eval_key = prompts_digest(r.prompt for r in eval_records)
    kept: dict[str, list[Record]] = {}
    dropped: dict[str, list[Record]] = {}
    for name, recs in pools.items():
        flags = contaminated(recs, n, eval_key, index)
        kept[name] = [r for r, hit in zip(recs, flags) if not hit]
        dropped[name] = [r for r, hit in zip(recs, flags) if hit]
        if recs and not kept[name]:
            raise DataError(f"{KEY}={n}: all {len(recs)} training records of source {name!r}"
                            f"{place(name, recs, where)} share a {n}-word "
                            "run with a held-out prompt of data.eval_sources or repeat one (the first: "
                            f"{recs[0].uid!r}); is it the held-out file itself, or do both carry one prompt template "
                            f"(a run found in {SHARED_BY} distinct held-out prompts is not matched)? {KEY}=0 keeps "
                            "them")
    if not quiet and global_rank_zero():
        report(dropped, sum(map(len, pools.values())), n)
    stats = {f"data/decontam_dropped_from/{name}": float(len(recs)) for name, recs in dropped.items()}
    return kept, {"data/decontam_dropped": float(sum(map(len, dropped.values()))), **stats}


def place(name: str, recs: list[Record], where: Mapping[str, str] | None) -> str:
    """``, data.sources.0 (data/a.jsonl),`` (``where``), else ``, read from data/a.jsonl,`` (the first record's
    file), else "": which entry a pool is, where several file sources would otherwise read alike."""
    if where and name in where:
        return f", {where[name]},"
    read = file_and_row(recs[0]) if recs else None
    return f", read from {read[0]}," if read else ""


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


def global_rank_zero() -> bool:
    """Whether this process is the global rank 0 of its run (or the run's only process), as the environment
    says before Lightning's trainer sets ranks (the records are built before it): the first of
    :data:`RANK_VARIABLES` present is 0, and so is the node's rank (the first of :data:`NODE_VARIABLES`), which
    Lightning's launcher combines with ``LOCAL_RANK``: every node's local rank 0 would say it otherwise."""
    rank = next((os.environ[name] for name in RANK_VARIABLES if name in os.environ), "0")
    node = next((os.environ[name] for name in NODE_VARIABLES if name in os.environ), "0")
    return all(not value.strip().isdigit() or int(value) == 0 for value in (rank, node))
