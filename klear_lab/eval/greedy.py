"""Held-out evaluation: greedy decoding of eval prompts, scored by each record's verifier."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch

from klear_lab.data.records import Record
from klear_lab.data.sft import prompt_ids


@dataclass
class EvalResult:
    """Per-record completions and correctness, aggregated into namespaced metrics."""

    records: list[Record]
    completions: list[str]
    correct: list[bool]

    def metrics(self, prefix: str = "val") -> dict[str, float]:
        by_source: dict[str, list[bool]] = defaultdict(list)
        for rec, ok in zip(self.records, self.correct):
            by_source[rec.source].append(ok)
        out = {f"{prefix}/acc": sum(self.correct) / max(len(self.correct), 1),
               f"{prefix}/n": float(len(self.correct))}
        for source, oks in by_source.items():
            out[f"{prefix}/{source}/acc"] = sum(oks) / len(oks)
        for level in sorted({r.difficulty for r in self.records}):
            oks = [ok for r, ok in zip(self.records, self.correct) if r.difficulty == level]
            out[f"{prefix}/level{level}/acc"] = sum(oks) / len(oks)
        return out


@torch.no_grad()
def generate(model, tokenizer, prompts: list[str], max_new_tokens: int, batch_size: int,
             do_sample: bool = False, temperature: float = 1.0) -> list[str]:
    """Left-padded batched ``generate`` with the KV cache; returns the decoded completions."""
    was_training = model.training
    model.eval()
    out: list[str] = []
    device = next(model.parameters()).device
    for start in range(0, len(prompts), batch_size):
        chunk = [prompt_ids(tokenizer, p) for p in prompts[start:start + batch_size]]
        width = max(len(c) for c in chunk)
        ids = torch.full((len(chunk), width), tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, c in enumerate(chunk):
            ids[i, width - len(c):] = torch.tensor(c)
            mask[i, width - len(c):] = 1
        gen = model.generate(
            input_ids=ids.to(device), attention_mask=mask.to(device), max_new_tokens=max_new_tokens,
            do_sample=do_sample, temperature=temperature if do_sample else None, top_p=None, top_k=None,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        )
        out += tokenizer.batch_decode(gen[:, width:], skip_special_tokens=False)
    model.train(was_training)
    return [_strip_special(text, tokenizer) for text in out]


def _strip_special(text: str, tokenizer) -> str:
    """Cut at EOS and drop padding, keeping ``<think>`` tags (they are graded)."""
    eos = tokenizer.eos_token
    if eos and eos in text:
        text = text[: text.index(eos)]
    return text.replace(tokenizer.pad_token or "\0", "")


def evaluate(model, tokenizer, records: list[Record], rewards: dict[str, object],
             max_new_tokens: int, batch_size: int) -> EvalResult:
    """Greedy-decode every record and verify with ``rewards[record.task]``."""
    completions = generate(model, tokenizer, [r.prompt for r in records], max_new_tokens, batch_size)
    correct = [False] * len(records)
    for task, reward in rewards.items():
        idx = [i for i, r in enumerate(records) if r.task == task]
        if idx:
            scored = reward([completions[i] for i in idx], [records[i] for i in idx])
            for i, s in zip(idx, scored):
                correct[i] = bool(s.acc)
    return EvalResult(records, completions, correct)
