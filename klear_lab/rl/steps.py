"""Pure step functions of the RL loop: token log-probs, group scoring, minibatch planning.

Shapes: ``B`` prompts, ``G`` responses per prompt, ``N = B * G`` sequences, ``T`` response tokens,
``V`` vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from klear_lab.data.records import Record
from klear_lab.errors import component_error
from klear_lab.rl.token_stats import chunked_head_stats, decoder_and_head, token_stats


def response_logp(model, prompt_ids: list[list[int]], response_ids: torch.Tensor, response_mask: torch.Tensor,
                  pad_id: int, temperature: float = 1.0, with_entropy: bool = False, chunk_tokens: int = 0,
                  entropy_grad: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropies) of the response tokens under ``model``, teacher-forced.

    Each row is ``prompt + response`` right-padded; position ``p + t - 1`` predicts response
    token ``t``. Logits are divided by the sampling temperature, as the engine sampled.
    ``chunk_tokens`` > 0 runs the LM head that many response tokens at a time, recomputed in
    backward (:mod:`klear_lab.rl.token_stats`): the same values in [N, chunk, V] memory, not [N, T, V].
    ``entropy_grad`` False computes the entropies outside autograd (logged, not in the loss).

    Args:
        prompt_ids: unpadded prompt ids per sequence (N lists).
        response_ids: [N, T] sampled tokens (right-padded). response_mask: [N, T].
    Returns:
        logp [N, T] (0 at padding) and entropy [N, T] or None, on the model's device (the rows are
        built on the host, where a rollout's tensors live, and moved there in one copy each).
    """
    n, t = response_ids.shape
    plens = torch.tensor([len(p) for p in prompt_ids])  # [N]
    width = int(plens.max()) + t
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    rlens = response_mask.sum(-1).long().tolist()  # [N]
    response_cpu = response_ids.cpu()
    for i, p in enumerate(prompt_ids):
        ids[i, : len(p)] = torch.tensor(p)
        ids[i, len(p): len(p) + t] = response_cpu[i]
        attn[i, : len(p) + rlens[i]] = 1
    device = next(model.parameters()).device
    ids, attn, plens = ids.to(device), attn.to(device), plens.to(device)
    response_ids, response_mask = response_ids.to(device), response_mask.to(device)
    pos = (plens[:, None] - 1 + torch.arange(t, device=device)[None, :]).clamp(max=width - 1)  # [N, T]
    if chunk_tokens > 0:
        decoder, head = decoder_and_head(model)
        hidden = decoder(input_ids=ids, attention_mask=attn, use_cache=False).last_hidden_state  # [N, W, H]
        sel = hidden.gather(1, pos[..., None].expand(-1, -1, hidden.shape[-1]))  # [N, T, H]
        logp, entropy = chunked_head_stats(head, sel, response_ids, temperature, with_entropy, chunk_tokens,
                                           entropy_grad)
    else:
        logits = model(input_ids=ids, attention_mask=attn, use_cache=False).logits  # [N, W, V]
        sel = logits.gather(1, pos[..., None].expand(-1, -1, logits.shape[-1]))  # [N, T, V]
        logp, entropy = token_stats(sel, response_ids, temperature, with_entropy, entropy_grad)
    return logp * response_mask, entropy * response_mask if entropy is not None else None


@dataclass(frozen=True)
class ScoredGroups:
    """Rewards of one rollout batch, grouped by prompt.

    Attributes:
        scores: [B, G] shaped rewards (after any overlong penalty).
        acc: [B, G] bool, fully correct (the α-term positives and the ``acc`` filter metric).
        format_ok: [B, G] bool.
    """

    scores: torch.Tensor
    acc: torch.Tensor
    format_ok: torch.Tensor


def score_groups(reward, texts: list[str], records: list[Record], group_size: int) -> ScoredGroups:
    """Score ``N = B * G`` responses (records repeated per response) and reshape to groups."""
    outs = reward(texts, records)
    check_reward_outputs(reward, outs, len(texts))
    b = len(texts) // group_size
    return ScoredGroups(
        scores=torch.tensor([o.score for o in outs], dtype=torch.float32).view(b, group_size),
        acc=torch.tensor([o.acc for o in outs]).view(b, group_size),
        format_ok=torch.tensor([o.format_ok for o in outs]).view(b, group_size),
    )


def check_reward_outputs(reward: object, outs: object, n: int,
                         reads: tuple[str, ...] = ("score", "acc", "format_ok")) -> None:
    """Raise a ``ComponentError`` naming ``reward`` unless ``outs`` holds one output for each of ``n`` completions,
    each with the ``RewardOutput`` fields the caller ``reads`` (a plugin's mistake, named before it fails deep
    in the step or a zip cuts the verdicts short)."""
    wrong = _wrong_reward_outputs(outs, n, reads)
    if wrong:
        raise component_error("reward", reward, f"returned {wrong} for {n} completions; a reward returns one "
                              "RewardOutput per completion, in order (klear_lab/rewards/base.py)")


def _wrong_reward_outputs(outs: object, n: int, reads: tuple[str, ...]) -> str | None:
    """What is wrong with a reward's ``outs`` for ``n`` completions, or None when nothing is."""
    if not isinstance(outs, (list, tuple)):
        return type(outs).__name__
    if len(outs) != n:
        return f"a {type(outs).__name__} of {len(outs)}"
    odd = next((o for o in outs if not all(hasattr(o, name) for name in reads)), None)
    return None if odd is None else f"a {type(outs).__name__} holding {type(odd).__name__}"


def group_rows(groups: list[int], group_size: int) -> torch.Tensor:
    """Sequence rows of the given groups: group g owns rows g*G .. g*G+G-1."""
    return torch.tensor([g * group_size + j for g in groups for j in range(group_size)], dtype=torch.long)


def split_rows(rows: torch.Tensor, micro: int) -> list[torch.Tensor]:
    """Micro-batches of at most ``micro`` rows (0 = one micro-batch)."""
    if micro <= 0 or micro >= len(rows):
        return [rows]
    return list(torch.split(rows, micro))
