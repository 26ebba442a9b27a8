"""The ``hf`` rollout's logits processor: repetition penalty, temperature, top-k and top-p applied in
transformers' and vLLM's order, log p(sampled token) recorded, the token drawn from the row's own generator
(see ``rollout/hf.py``). Outside the ``rollout`` package, whose every module the registry imports when a
config is composed: transformers' generation code costs half a second there, and only a rollout needs it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor
from transformers import LogitsProcessor
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper


class SampleLogProbs(LogitsProcessor):
    """Applies the repetition penalty, temperature, top-k and top-p, records log p(sampled token) under
    the result, and draws the token.

    Called once per step with the tokens so far; the log-softmax of step t is gathered at the token
    sampled at t when step t+1 (or :meth:`finish`) sees it. When sampling, row r draws its token at
    step t with uniform ``t`` of ``torch.rand(max_new_tokens)`` from a generator seeded with
    ``seeds[r]`` (drawn once, on the CPU; finished rows use theirs too), and the returned scores are
    one-hot on it, so transformers' greedy step picks that token. Greedy (temperature 0) records
    ``log_softmax(logits)`` (penalised) and leaves the choice to transformers.

    The repetition penalty counts the tokens of each row from ``starts[r]`` on (its prompt and its
    response so far), not the left padding, so a row's samples do not depend on its batch.
    """

    def __init__(self, temperature: float, top_p: float, seeds: Sequence[int], max_new_tokens: int,
                 top_k: int = 0, repetition_penalty: float = 1.0, starts: Sequence[int] | None = None) -> None:
        self.penalty, self.starts = repetition_penalty, list(starts) if starts is not None else [0] * len(seeds)
        self.warpers: list[LogitsProcessor] = []
        if temperature > 0 and temperature != 1.0:
            self.warpers.append(TemperatureLogitsWarper(temperature))
        if temperature > 0 and top_k > 0:
            self.warpers.append(TopKLogitsWarper(top_k))
        if temperature > 0 and top_p < 1.0:
            self.warpers.append(TopPLogitsWarper(top_p))
        self.sample, self.seeds, self.max_new_tokens = temperature > 0, list(seeds), max_new_tokens
        self.uniforms: Tensor | None = None  # [b, max_new_tokens] float64, made at the first step
        self.t = 0  # decode step
        self.prev: Tensor | None = None  # [b, V] log-probs of the latest step
        self.steps: list[Tensor] = []  # each [b]

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        if self.prev is not None:
            self.steps.append(self.prev.gather(-1, input_ids[:, -1:]).squeeze(-1))
        if self.penalty != 1.0:
            if not isinstance(self.starts, Tensor):  # once, on the device of the ids
                self.starts = torch.tensor(self.starts, device=input_ids.device)
            scores = penalise_repeats(scores, input_ids, self.starts, self.penalty)
        for warp in self.warpers:
            scores = warp(input_ids, scores)
        self.prev = torch.log_softmax(scores.float(), dim=-1)
        if not self.sample:
            return scores
        return one_hot_scores(scores, self._draw(self.prev))

    def _draw(self, logp: Tensor) -> Tensor:
        """One token per row of ``logp`` [b, V]: inverse-CDF sampling with the row's uniform for this step.

        One uniform per row and step, however large the vocabulary: the cost is a cumulative sum over
        the vocabulary, less than ``torch.multinomial``'s (``scripts/bench_sampling.py``).
        """
        if self.uniforms is None:
            if len(self.seeds) != logp.shape[0]:
                raise RuntimeError(f"{len(self.seeds)} row seeds for a batch of {logp.shape[0]} rows")
            rows = [torch.rand(self.max_new_tokens, generator=torch.Generator().manual_seed(s), dtype=torch.float64)
                    for s in self.seeds]
            self.uniforms = torch.stack(rows).to(logp.device)  # [b, T]
        if self.t >= self.max_new_tokens:
            raise RuntimeError(f"decode step {self.t} past max_new_tokens {self.max_new_tokens}")
        cdf = logp.double().exp_().cumsum_(-1)  # [b, V]; zero-probability tokens add a flat step
        total = cdf[:, -1]  # [b], 1 up to rounding
        if not bool(torch.isfinite(total).all() and (total > 0).all()):
            raise RuntimeError(f"decode step {self.t}: the policy's next-token probabilities are NaN, inf or all "
                               "zero (diverged weights?)")
        target = (self.uniforms[:, self.t] * total)[:, None]  # [b, 1] in [0, total)
        self.t += 1
        chosen = torch.searchsorted(cdf, target, right=True).squeeze(-1)  # first token whose cdf exceeds it
        return chosen.clamp_(max=logp.shape[-1] - 1)

    def finish(self, generated: Tensor) -> Tensor:
        """Log-probs of all generated tokens. ``generated``: [b, W]; returns [b, W] float."""
        steps = [*self.steps, self.prev.gather(-1, generated[:, -1:]).squeeze(-1)]
        if len(steps) != generated.shape[1]:
            raise RuntimeError(f"recorded {len(steps)} steps for {generated.shape[1]} generated tokens")
        return torch.stack(steps, dim=1)


def penalise_repeats(scores: Tensor, input_ids: Tensor, starts: Sequence[int] | Tensor, penalty: float) -> Tensor:
    """Repetition penalty (CTRL, Keskar et al. 2019, as transformers and vLLM apply it): the scores [b, V]
    of tokens present in row r of ``input_ids`` [b, L] from ``starts[r]`` on are divided by ``penalty``
    where positive and multiplied by it where negative."""
    positions = torch.arange(input_ids.shape[1], device=input_ids.device)  # [L]
    real = positions[None, :] >= torch.as_tensor(starts, device=input_ids.device)[:, None]  # [b, L]
    seen = torch.zeros_like(scores).scatter_add_(1, input_ids, real.to(scores.dtype)) > 0  # [b, V]
    penalised = torch.where(scores > 0, scores / penalty, scores * penalty)
    return torch.where(seen, penalised, scores)


def one_hot_scores(scores: Tensor, chosen: Tensor) -> Tensor:
    """Scores [b, V] that leave greedy decoding one choice per row: 0 at ``chosen`` [b], -inf elsewhere."""
    return torch.full_like(scores, -math.inf).scatter_(1, chosen[:, None], 0.0)
