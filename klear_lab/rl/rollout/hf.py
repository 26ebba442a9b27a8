"""``hf``: rollouts with transformers ``generate`` on the live policy (KV cache, left padding, batched).

Sampling log-probs are recorded by a logits processor that applies the repetition penalty,
temperature, top-k and top-p itself (in transformers' and vLLM's order), as the last processor before
sampling, and only one [b, V] tensor is kept per step (``output_scores`` would keep all T of them).
The same processor draws the token from that distribution (with a generator of the row's own) and
hands transformers a one-hot choice, which it decodes greedily: a sample depends on its prompt's
seed, not on ``batch_size`` or the other prompts of the call (up to float rounding of batched
matmuls), as with vLLM's per-request seeds. The model's own generation config (e.g. a hub
``temperature`` or ``top_k``) is swapped out for a clean one during the call, so nothing else
reshapes the logits.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from klear_lab.registry import ROLLOUT
from klear_lab.rl.rollout.base import (
    Prompt,
    Rollout,
    RolloutRuntime,
    Sample,
    Seed,
    assemble,
    check_sampling,
    encode_prompts,
    eos_token_ids,
    prompt_seeds,
)


@ROLLOUT.register("hf")
@dataclass(frozen=True)
class HFRollout:
    """transformers ``generate`` on the policy itself: always fresh, no weight sync needed.

    Args:
        batch_size: Sequences (prompt copies) per ``generate`` call.
    """

    batch_size: int = 64

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")

    @classmethod
    def check_available(cls) -> None:
        """Nothing to check: transformers is a core dependency."""

    def start(self, model: torch.nn.Module, tokenizer) -> HFRolloutRuntime:
        """Bind the engine to a policy and its tokenizer."""
        return HFRolloutRuntime(self, model, tokenizer)


class HFRolloutRuntime(RolloutRuntime):
    """Samples from ``model`` as it is at each call (eval mode during generation, mode restored)."""

    def __init__(self, config: HFRollout, model: torch.nn.Module, tokenizer) -> None:
        if tokenizer.pad_token_id is None:
            raise ValueError("the tokenizer needs a pad token for batched (left-padded) generation")
        self.config, self.model, self.tokenizer = config, model, tokenizer
        self.eos_ids = eos_token_ids(tokenizer, model)

    def sync_weights(self, model: torch.nn.Module) -> None:
        """The HF engine samples with the live module; only rebinds if a different one is given."""
        self.model = model

    @torch.no_grad()
    def generate(self, prompts: Sequence[Prompt], n: int, max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, seed: Seed = None, top_k: int = 0, repetition_penalty: float = 1.0) -> Rollout:
        """See :meth:`RolloutRuntime.generate`."""
        check_sampling(n, max_new_tokens, temperature, top_p, top_k, repetition_penalty)
        warp = Warp(temperature, top_p, top_k, repetition_penalty)
        encoded = encode_prompts(self.tokenizer, prompts)
        flat = [ids for ids in encoded for _ in range(n)]  # prompt-major, N = B*n
        seeds = prompt_seeds(seed, len(encoded))
        if seeds is None:  # unseeded sampling: the seeds come from (and move) the caller's torch RNG
            seeds = torch.randint(0, 2**31 - n, (len(encoded),)).tolist() if temperature > 0 else [0] * len(encoded)
        rows = [s + j for s in seeds for j in range(n)]  # [N] sample j of a prompt: seed + j
        samples: list[Sample] = []
        with _eval_mode(self.model), clean_generation_config(self.model):
            for start in range(0, len(flat), self.config.batch_size):
                end = start + self.config.batch_size
                samples += self._generate_chunk(flat[start:end], rows[start:end], max_new_tokens, warp)
        return assemble(self.tokenizer, encoded, n, samples, self.tokenizer.pad_token_id, self.eos_ids)

    def _generate_chunk(self, chunk: list[list[int]], seeds: list[int], max_new_tokens: int,
                        warp: Warp) -> list[Sample]:
        """One left-padded ``generate`` call; returns unpadded samples with their log-probs."""
        from transformers import LogitsProcessorList

        from klear_lab.rl.hf_sampling import SampleLogProbs

        ids, mask = left_pad(chunk, self.tokenizer.pad_token_id, _device(self.model))  # [b, P]
        starts = [ids.shape[1] - len(c) for c in chunk]  # first real token of each row
        recorder = SampleLogProbs(warp.temperature, warp.top_p, seeds, max_new_tokens, top_k=warp.top_k,
                                  repetition_penalty=warp.repetition_penalty, starts=starts)
        out = self.model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
            logits_processor=LogitsProcessorList([recorder]),
            pad_token_id=self.tokenizer.pad_token_id, eos_token_id=self.eos_ids, use_cache=True,
        )
        gen = out[:, ids.shape[1]:]  # [b, W]
        logp = recorder.finish(gen)  # [b, W]
        return split_samples(gen.cpu(), logp.cpu(), self.eos_ids)


@dataclass(frozen=True)
class Warp:
    """The sampling settings of one ``generate`` call (see :meth:`RolloutRuntime.generate`)."""

    temperature: float
    top_p: float
    top_k: int
    repetition_penalty: float


def left_pad(seqs: list[list[int]], pad_id: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Left-padded ids and attention mask, both [b, P] long."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, width - len(s):] = torch.tensor(s, dtype=torch.long)
        mask[i, width - len(s):] = 1
    return ids.to(device), mask.to(device)


def split_samples(gen: Tensor, logp: Tensor, eos_ids: Sequence[int]) -> list[Sample]:
    """Cut each row of ``gen`` [b, W] after its first EOS (kept); rows without one are truncated.

    ``generate`` stops early only once every row has finished, so a row without EOS always holds
    exactly ``max_new_tokens`` tokens.
    """
    is_eos = torch.isin(gen, torch.tensor(list(eos_ids), dtype=gen.dtype))  # [b, W]
    samples = []
    for row, lp, hits in zip(gen.tolist(), logp.tolist(), is_eos, strict=True):
        idx = hits.nonzero()
        k = int(idx[0]) + 1 if len(idx) else len(row)
        samples.append(Sample(tokens=row[:k], logps=lp[:k], finished=bool(len(idx))))
    return samples


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


@contextlib.contextmanager
def _eval_mode(model: torch.nn.Module) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


@contextlib.contextmanager
def clean_generation_config(model: torch.nn.Module) -> Iterator[None]:
    """Hide the model's generation defaults (hub temperature/top_k/penalties) during the call.

    Temperature and top-p are applied, and tokens drawn, by ``hf_sampling.SampleLogProbs``; transformers
    decodes greedily (``do_sample=False``): the argmax of the one-hot scores it returns, or of the
    logits themselves at temperature 0. So transformers draws nothing from the global RNG.
    """
    from transformers import GenerationConfig

    saved = getattr(model, "generation_config", None)
    clean = GenerationConfig(
        eos_token_id=getattr(saved, "eos_token_id", None), pad_token_id=getattr(saved, "pad_token_id", None),
        bos_token_id=getattr(saved, "bos_token_id", None), do_sample=False,
    )
    model.generation_config = clean
    try:
        yield
    finally:
        model.generation_config = saved
