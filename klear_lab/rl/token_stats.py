"""Per-token log-probs and entropies of sampled responses, whole or a chunk of tokens at a time.

The plain path materialises the response logits [N, T, V] in float32 and keeps them for backward:
at the paper's scale (T = 32K responses, V = 151,936 for Qwen3) that is about 20 GB per sequence.
The chunked path (``rl.logp_chunk_tokens``) runs the decoder once, then the LM head, log-softmax and
entropy ``chunk`` response tokens at a time under activation checkpointing: backward recomputes a
chunk's logits instead of keeping them, so the peak is [N, chunk, V]. The values and gradients are
the plain path's (up to float rounding); ``scripts/bench_logp_chunks.py`` measures time and memory.
The idea is that of verl's and Liger's fused linear log-probs, here in plain torch.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint


def token_stats(logits: Tensor, tokens: Tensor, temperature: float, with_entropy: bool,
                entropy_grad: bool = True) -> tuple[Tensor, Tensor | None]:
    """log p(token) and the entropy of softmax(logits / temperature), in float32.

    Args:
        logits: [N, C, V] at the positions that predict ``tokens`` [N, C].
        entropy_grad: False computes the entropy outside autograd (a logged metric, not a loss term),
            so backward keeps no [N, C, V] tensor for it.
    Returns:
        logp [N, C] and entropy [N, C] (None unless ``with_entropy``).
    """
    z = logits.float() / temperature  # [N, C, V]
    lse = torch.logsumexp(z, dim=-1)  # [N, C]
    logp = z.gather(-1, tokens[..., None]).squeeze(-1) - lse
    if not with_entropy:
        return logp, None
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        logprobs = z - lse[..., None]  # [N, C, V]
        return logp, -(logprobs.exp() * logprobs).sum(-1)


def chunked_head_stats(head: torch.nn.Module, hidden: Tensor, tokens: Tensor, temperature: float,
                       with_entropy: bool, chunk: int, entropy_grad: bool = True) -> tuple[Tensor, Tensor | None]:
    """:func:`token_stats` of ``head(hidden)``, ``chunk`` tokens at a time, each chunk's logits
    recomputed in backward rather than kept.

    Args:
        head: The LM head (``model.get_output_embeddings()``).
        hidden: [N, T, H] final hidden states at the positions that predict ``tokens`` [N, T].
    Returns:
        logp [N, T] and entropy [N, T] (None unless ``with_entropy``).
    """
    def stats(h: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
        logp, entropy = token_stats(head(h), t, temperature, with_entropy, entropy_grad)
        return logp, entropy if entropy is not None else torch.zeros_like(logp)

    grad = torch.is_grad_enabled()
    parts = [checkpoint(stats, hidden[:, s:s + chunk], tokens[:, s:s + chunk], use_reentrant=False) if grad
             else stats(hidden[:, s:s + chunk], tokens[:, s:s + chunk]) for s in range(0, tokens.shape[1], chunk)]
    logp = torch.cat([p[0] for p in parts], dim=1)
    return logp, torch.cat([p[1] for p in parts], dim=1) if with_entropy else None


def decoder_and_head(model) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The transformers decoder (final hidden states) and LM head of a causal LM."""
    get_decoder = getattr(model, "get_decoder", None)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    decoder = get_decoder() if callable(get_decoder) else None
    if decoder is None or head is None:
        raise ValueError(f"rl.logp_chunk_tokens needs a transformers causal LM with get_decoder() and an output "
                         f"embedding; {type(model).__name__} has no such pair: set rl.logp_chunk_tokens=0")
    return decoder, head


POST_PROCESSING = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")
"""transformers config attributes of models whose logits are not ``lm_head(hidden)`` (Gemma 2/3
soft-capping, Cohere's and Granite's scales)."""


def check_chunkable(model) -> None:
    """Raise ``ValueError`` before training if ``model`` visibly cannot be chunked: no decoder/head pair,
    or a config that post-processes the logits. Runs nothing (the model may not be on its device yet)."""
    decoder_and_head(model)
    config = getattr(model, "config", None)
    for name in POST_PROCESSING:
        if getattr(config, name, None) not in (None, 1, 1.0):
            raise ValueError(f"rl.logp_chunk_tokens: {type(model).__name__} post-processes its logits ({name}="
                             f"{getattr(config, name)!r}: soft-capping or a logit scale): set rl.logp_chunk_tokens=0")


def check_head_composes(model) -> None:
    """Raise ``ValueError`` unless the LM head applied to the decoder's hidden states gives ``model``'s
    logits: a model that post-processes them (logit soft-capping, a logit scale) cannot be chunked.
    One forward of three tokens: run it where the model trains (flash attention needs the GPU)."""
    decoder, head = decoder_and_head(model)
    ids = torch.tensor([[1, 2, 3]], device=next(model.parameters()).device)
    with torch.no_grad():
        whole = model(input_ids=ids, use_cache=False).logits.float()
        parts = head(decoder(input_ids=ids, use_cache=False).last_hidden_state).float()
    if not torch.allclose(whole, parts, rtol=1e-3, atol=1e-3):
        raise ValueError(f"rl.logp_chunk_tokens: {type(model).__name__}'s logits are not its LM head applied to its "
                         "decoder's hidden states (soft-capping or a logit scale?): set rl.logp_chunk_tokens=0")
