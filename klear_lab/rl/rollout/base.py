"""The rollout contract shared by every engine: the :class:`Rollout` batch and the runtime interface.

Sequences are laid out prompt-major: the ``n`` samples of prompt ``b`` are rows ``b*n .. b*n+n-1``
(``group_index`` says so explicitly). ``sample_logp`` is the log-probability of each sampled token
under the distribution the engine actually sampled from: ``log_softmax(logits / temperature)``,
renormalised over the top-k tokens and the top-p nucleus when those are set (so without them it
equals a teacher-forced forward pass at the same temperature), after any repetition penalty. At
``temperature == 0`` (greedy) the engines report ``log_softmax(logits)`` (penalised), as vLLM does.

``top_k`` and ``repetition_penalty`` are evaluation settings (the paper's released eval script uses
top_k 20 and repetition penalty 1.05); RL rollouts leave them off, since the update's log-probs are
those of the unmodified policy. Callers pass them only when set, so an engine written before them
keeps working for everything else.
"""

from __future__ import annotations

import contextlib
import hashlib
import numbers
import random
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from klear_lab.data.sft import prompt_ids as chat_prompt_ids
from klear_lab.data.sft import turn_end
from klear_lab.rl.rollout.checks import (  # noqa: F401 - re-exported: the contract and its checks
    ENGINE_CONTRACT,
    check_rollout_engine,
    check_rollout_runtime,
)

Prompt = str | Sequence[int]
Seed = int | Sequence[int] | None  # one call seed, or one seed per prompt


@dataclass(frozen=True)
class Rollout:
    """A batch of N = B*G sampled responses (CPU tensors).

    Attributes:
        prompt_ids: Unpadded prompt token ids, one list per sequence (N lists).
        response_ids: Response tokens, right-padded with the pad id. Shape: [N, T] long.
        response_mask: 1 for generated tokens (including EOS when produced). Shape: [N, T] float.
        sample_logp: Sampling log-prob of each generated token, 0 at padding. Shape: [N, T] float.
        finished: True where EOS was generated, False where cut at max_new_tokens. Shape: [N] bool.
        texts: Decoded responses, EOS/padding stripped, ``<think>`` tags kept (N strings).
        group_index: Prompt index 0..B-1 of each sequence, groups contiguous. Shape: [N] long.
    """

    prompt_ids: list[list[int]]
    response_ids: Tensor
    response_mask: Tensor
    sample_logp: Tensor
    finished: Tensor
    texts: list[str]
    group_index: Tensor

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def response_lengths(self) -> Tensor:
        """Generated tokens per sequence. Shape: [N] long."""
        return self.response_mask.sum(-1).long()


@dataclass(frozen=True)
class Sample:
    """One generated sequence before padding: tokens (EOS included), their log-probs, finished flag."""

    tokens: list[int]
    logps: list[float]
    finished: bool


class RolloutRuntime(ABC):
    """A started engine bound to a policy and tokenizer. Use as a context manager or call ``close``."""

    @abstractmethod
    def generate(self, prompts: Sequence[Prompt], n: int, max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, seed: Seed = None, top_k: int = 0, repetition_penalty: float = 1.0) -> Rollout:
        """Sample ``n`` responses per prompt.

        Args:
            prompts: B prompt strings (chat-formatted here) or already formatted token-id lists.
            n: Samples per prompt (G).
            max_new_tokens: Cap on generated tokens per sequence.
            temperature: Sampling temperature; 0 means greedy.
            top_p: Nucleus mass in (0, 1]; 1 disables it.
            seed: Makes the batch reproducible when given: one seed per prompt, or one call seed
                from which :func:`prompt_seeds` draws them by position. A prompt's samples depend only
                on its seed, not on the engine's batching or on which prompts share its call.
            top_k: Sample among the k most likely tokens; 0 disables it.
            repetition_penalty: Divide the positive logits (multiply the negative ones) of every token
                already in the prompt or the response by it, as transformers and vLLM do; 1 disables it.

        Returns:
            A :class:`Rollout` with N = B*n sequences.
        """

    def check_fits(self, prompts: Sequence[Prompt], max_new_tokens: int, where: str) -> None:  # noqa: B027
        """Raise ``ConfigError`` if some prompt + ``max_new_tokens`` cannot be decoded (default: no limit).

        Called on a run's whole prompt pool before training, so a prompt the engine cannot take stops
        the run at the start rather than at the step that draws it.
        """

    @abstractmethod
    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the engine sample from ``model``'s current weights (call after every optimizer step)."""

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release the engine's resources (idempotent)."""

    def __enter__(self) -> RolloutRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_sampling(n: int, max_new_tokens: int, temperature: float, top_p: float, top_k: int = 0,
                   repetition_penalty: float = 1.0) -> None:
    """Raise ``ValueError`` for sampling arguments no engine accepts."""
    if n < 1:
        raise ValueError(f"n (samples per prompt) must be >= 1, got {n}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k must be an integer >= 0 (0 = off), got {top_k!r}")
    if not repetition_penalty > 0:
        raise ValueError(f"repetition_penalty must be > 0 (1 = off), got {repetition_penalty}")


def encode_prompts(tokenizer, prompts: Sequence[Prompt]) -> list[list[int]]:
    """Chat-format string prompts (``klear_lab.data.sft.prompt_ids``); token-id prompts pass through."""
    return [chat_prompt_ids(tokenizer, p) if isinstance(p, str) else [int(t) for t in p] for p in prompts]


def eos_token_ids(tokenizer, model: torch.nn.Module | None = None) -> list[int]:
    """EOS ids of the tokenizer, then the special token that ends the chat template's turn (what SFT taught:
    :func:`klear_lab.data.sft.turn_end`, whose last token it is), then any the model's generation config adds
    (order kept, no repeats)."""
    ids: list[int] = []
    extra = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    end = tokenizer(turn_end(tokenizer), add_special_tokens=False)["input_ids"][-1:]
    for value in (tokenizer.eos_token_id, end, extra):
        for i in value if isinstance(value, (list, tuple)) else [value]:
            if i is not None and int(i) not in ids:
                ids.append(int(i))
    if not ids:
        raise ValueError("the tokenizer has no eos_token_id; rollouts need one to stop")
    return ids


def decode_response(tokenizer, tokens: Sequence[int], eos_ids: Sequence[int]) -> str:
    """Text of a response without its EOS and padding; special tokens such as ``<think>`` kept."""
    if tokens and tokens[-1] in eos_ids:
        tokens = tokens[:-1]
    text = tokenizer.decode(list(tokens), skip_special_tokens=False)
    pad = tokenizer.pad_token
    return text.replace(pad, "") if pad else text


def assemble(tokenizer, prompts: list[list[int]], n: int, samples: list[Sample], pad_id: int,
             eos_ids: Sequence[int]) -> Rollout:
    """Pad per-sequence samples (prompt-major, ``n`` per prompt) into a :class:`Rollout`."""
    if len(samples) != len(prompts) * n:
        raise ValueError(f"expected {len(prompts) * n} samples, got {len(samples)}")
    width = max(1, max(len(s.tokens) for s in samples))
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long)  # [N, T]
    mask = torch.zeros(len(samples), width)  # [N, T]
    logp = torch.zeros(len(samples), width)  # [N, T]
    for i, s in enumerate(samples):
        k = len(s.tokens)
        ids[i, :k] = torch.tensor(s.tokens, dtype=torch.long)
        mask[i, :k] = 1.0
        logp[i, :k] = torch.tensor(s.logps, dtype=torch.float32)
    return Rollout(
        prompt_ids=[list(prompts[i // n]) for i in range(len(samples))],
        response_ids=ids, response_mask=mask, sample_logp=logp,
        finished=torch.tensor([s.finished for s in samples], dtype=torch.bool),
        texts=[decode_response(tokenizer, s.tokens, eos_ids) for s in samples],
        group_index=torch.arange(len(prompts)).repeat_interleave(n),
    )


def prompt_seeds(seed: Seed, count: int) -> list[int] | None:
    """One sampling seed per prompt: ``seed`` itself when it is a list, else drawn from the call seed.

    Sample ``j`` of a prompt with seed ``s`` is drawn with seed ``s + j`` (vLLM's rule for a request's
    children; the ``hf`` engine follows it), so a sample does not depend on which other prompts share
    its call or its batch. ``None`` (unseeded) stays ``None``.
    """
    if seed is None:
        return None
    if isinstance(seed, numbers.Integral):
        rng = random.Random(int(seed))
        return [rng.getrandbits(31) for _ in range(count)]
    seeds = [int(s) for s in seed]
    if len(seeds) != count:
        raise ValueError(f"seed: got {len(seeds)} per-prompt seeds for {count} prompts")
    return seeds


def keyed_seed(seed: int, key: str) -> int:
    """A 31-bit seed from a run seed and a stable key (e.g. a record's uid), the same in every process."""
    digest = hashlib.blake2b(f"{seed}/{key}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") >> 1


def policy_weights(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """(HF checkpoint name, tensor) pairs of the policy, wrapper prefixes stripped, no copies."""
    out = []
    for name, tensor in model.state_dict().items():
        for prefix in ("_orig_mod.", "module."):
            name = name.removeprefix(prefix)
        out.append((name, tensor.detach()))
    return out


@contextlib.contextmanager
def preserve_rng() -> Iterator[None]:
    """Restore the caller's python, numpy and torch RNG states after the block."""
    import numpy as np

    py_state, np_state = random.getstate(), np.random.get_state()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        yield
    random.setstate(py_state)
    np.random.set_state(np_state)
