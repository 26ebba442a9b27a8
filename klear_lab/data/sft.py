"""SFT examples: chat-template tokenization with prompt masking, best-fit-decreasing packing.

A packed row holds several examples back to back; each restarts its ``position_ids`` at 0, which
transformers turns into attention isolated per sequence (flash/sdpa varlen or a block mask), so
packed logits equal unpacked ones (tested). Labels are pre-shifted here: ``labels[t]`` is the
token at ``t + 1`` when that token is a response token of the same example, else -100.
"""

from __future__ import annotations

import bisect
import itertools
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from klear_lab.data.records import Record

IGNORE = -100


@dataclass(frozen=True)
class Example:
    """One tokenized prompt + response; ``n_prompt`` leading tokens are masked out of the loss."""

    input_ids: tuple[int, ...]
    n_prompt: int

    def __len__(self) -> int:
        return len(self.input_ids)


def prompt_ids(tokenizer, prompt: str) -> list[int]:
    """Token ids of the chat-formatted prompt, ending with the assistant header."""
    out = tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                        add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out)


_PROBE = "klear-turn-end-probe"


def turn_end(tokenizer) -> str:
    """What closes an assistant turn: the chat template's text after a reply, up to and with its first special
    token (Qwen's ``<|im_end|>``), else the tokenizer's ``eos_token``. SFT writes it after each response, and
    rollouts stop at it (:func:`klear_lab.rl.rollout.base.eos_token_ids`).

    Qwen3-Base's ``eos_token`` is ``<|endoftext|>``, but its template ends a turn with ``<|im_end|>``: a model
    taught to end with the former would end its turns unlike the template it is prompted with.
    """
    eos = tokenizer.eos_token or ""
    try:
        turns = [{"role": "user", "content": "q"}, {"role": "assistant", "content": _PROBE}]
        text = tokenizer.apply_chat_template(turns, tokenize=False)
    except Exception as exc:  # noqa: BLE001 - no template, or one that refuses this conversation: the eos_token
        return _eos_instead(eos, f"its chat template refused a user turn and a reply ({type(exc).__name__}: {exc})")
    after = text.rsplit(_PROBE, 1)[1] if isinstance(text, str) and _PROBE in text else ""
    ends = [after.find(t) + len(t) for t in _special_tokens(tokenizer) if t in after]
    return after[:min(ends)] if ends else _eos_instead(eos, "its chat template writes no special token after a reply")


def _eos_instead(eos: str, why: str) -> str:
    warnings.warn(f"the tokenizer's turn end: {why}; SFT ends each response with its eos_token {eos!r}, and "
                  "rollouts stop there", UserWarning, stacklevel=3)
    return eos


def _special_tokens(tokenizer) -> set[str]:
    """The tokenizer's special tokens, those added as special beside its named ones included."""
    added = getattr(tokenizer, "added_tokens_decoder", {}).values()
    return {t for t in getattr(tokenizer, "all_special_tokens", []) if t} | {t.content for t in added if t.special}


def tokenize_records(tokenizer, records: list[Record], max_length: int) -> tuple[list[Example], int]:
    """Tokenize records with teacher responses, each closed by :func:`turn_end`; returns (examples, number
    dropped as too long)."""
    examples, dropped = [], 0
    eos = turn_end(tokenizer)
    for rec in records:
        if rec.response is None:
            continue
        p = prompt_ids(tokenizer, rec.prompt)
        r = tokenizer(rec.response + eos, add_special_tokens=False)["input_ids"]
        if len(p) + len(r) > max_length:
            dropped += 1
            continue
        examples.append(Example(tuple(p + r), len(p)))
    return examples, dropped


def pack_bfd(lengths: list[int], capacity: int) -> list[list[int]]:
    """Best-fit-decreasing bin packing: indices grouped into bins of total length <= capacity.

    Each item goes into the fullest bin that still has room (O(n log n) with a sorted list
    of remaining capacities).
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    bins: list[list[int]] = []
    free: list[tuple[int, int]] = []  # (remaining capacity, bin index), sorted
    for i in order:
        n = lengths[i]
        if n > capacity:
            raise ValueError(f"item {i} of length {n} exceeds bin capacity {capacity}")
        k = bisect.bisect_left(free, (n, -1))
        if k == len(free):
            bins.append([i])
            bisect.insort(free, (capacity - n, len(bins) - 1))
        else:
            room, b = free.pop(k)
            bins[b].append(i)
            bisect.insort(free, (room - n, b))
    return bins


def packed_rows(examples: list[Example], capacity: int, pack: bool) -> list[list[Example]]:
    """Rows of examples: packed into ``capacity`` tokens, or one example per row."""
    if not pack:
        return [[e] for e in examples]
    return [[examples[i] for i in b] for b in pack_bfd([len(e) for e in examples], capacity)]


def collate_rows(rows: list[list[Example]], pad_id: int) -> dict[str, torch.Tensor]:
    """Pad rows to the longest; returns input_ids, position_ids, labels [B, L] and token counts."""
    width = max(sum(len(e) for e in row) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    pos = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE, dtype=torch.long)
    real = 0
    for b, row in enumerate(rows):
        start = 0
        for ex in row:
            n = len(ex)
            seq = torch.tensor(ex.input_ids)
            ids[b, start:start + n] = seq
            pos[b, start:start + n] = torch.arange(n)
            # position t predicts token t+1 when t+1 is a response token of this example
            labels[b, start + ex.n_prompt - 1:start + n - 1] = seq[ex.n_prompt:]
            start += n
        real += start
        pos[b, start:] = torch.arange(width - start)  # padding tail: its own "sequence"
    return {"input_ids": ids, "position_ids": pos, "labels": labels,
            "real_tokens": torch.tensor(real), "total_tokens": torch.tensor(ids.numel())}


def packing_efficiency(rows: list[list[Example]], capacity: int) -> float:
    """Real tokens / row slots when every row is padded to ``capacity``."""
    if not rows:
        return 0.0
    return sum(len(e) for row in rows for e in row) / (len(rows) * capacity)


def with_step_tokens(batches: Iterator[dict[str, torch.Tensor]], accumulate: int, first: int,
                     n_batches: int) -> Iterator[dict[str, torch.Tensor]]:
    """Each batch with ``step_label_tokens``, the loss tokens of its whole optimizer step, and
    ``step_micro_batches``, the micro-batches of that step.

    An epoch's batches ``first .. n_batches - 1`` (``first`` > 0 on a resumed run) are read one
    accumulation window ahead. Windows are Lightning's: batch ``i`` belongs to window ``i //
    accumulate``, and the epoch's last window may be shorter. ``sft.loss: step-token-mean`` divides by
    the token count (summed over ranks), so every response token of a step weighs the same;
    ``token-mean`` averages over the window's micro-batches (Lightning divides by ``accumulate``).
    """
    i = first
    while i < n_batches:
        end = min((i // accumulate + 1) * accumulate, n_batches)
        window = list(itertools.islice(batches, end - i))
        if not window:
            return
        count = sum(int((b["labels"] != IGNORE).sum()) for b in window)
        for b in window:
            yield {**b, "step_label_tokens": torch.tensor(count), "step_micro_batches": torch.tensor(len(window))}
        i = end
