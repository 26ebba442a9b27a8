"""Held-out evaluation: greedy decoding, or the paper's avg@k (k samples per problem), scored by each
record's verifier.

The paper reports mean pass@1 over k samples at temperature 0.6, top_p 0.95 ("avg@64" in its main
table, avg@32 / avg@4 in its ablations; ``../shared/docs/paper.md`` §5). ``Sampling`` carries those
settings; ``val/acc`` is then the mean over problems of the fraction of their k samples that pass,
and ``val/pass_at_k`` the fraction of problems with at least one passing sample. The samples come
from a torch RNG forked and seeded from the run seed, so an evaluation is reproducible from the saved
config (batched sampling makes them depend on ``eval.batch_size`` too) and does not move the
training RNG.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch

from klear_lab.data.records import Record
from klear_lab.data.sft import prompt_ids


@dataclass(frozen=True)
class Sampling:
    """How held-out completions are drawn: ``temperature`` 0 is greedy (one sample)."""

    samples: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0


GREEDY = Sampling()


@dataclass
class EvalResult:
    """Per-record completions and verdicts (``samples`` of each), aggregated into namespaced metrics."""

    records: list[Record]
    completions: list[list[str]]  # [n records][k samples]
    verdicts: list[list[bool]]  # [n records][k samples]

    @property
    def samples(self) -> int:
        return len(self.verdicts[0]) if self.verdicts else 1

    @property
    def scores(self) -> list[float]:
        """Each record's pass@1 estimate: the fraction of its samples that pass (0 or 1 when greedy)."""
        return [sum(v) / len(v) for v in self.verdicts]

    def metrics(self, prefix: str = "val") -> dict[str, float]:
        scores = self.scores
        by_source: dict[str, list[float]] = defaultdict(list)
        for rec, score in zip(self.records, scores):
            by_source[rec.source].append(score)
        out = {f"{prefix}/acc": sum(scores) / max(len(scores), 1), f"{prefix}/n": float(len(scores))}
        if self.samples > 1:
            out[f"{prefix}/pass_at_k"] = sum(any(v) for v in self.verdicts) / max(len(self.verdicts), 1)
            out[f"{prefix}/samples"] = float(self.samples)
        for source, vals in by_source.items():
            out[f"{prefix}/{source}/acc"] = sum(vals) / len(vals)
        for level in sorted({r.difficulty for r in self.records}):
            vals = [s for r, s in zip(self.records, scores) if r.difficulty == level]
            out[f"{prefix}/level{level}/acc"] = sum(vals) / len(vals)
        return out


@torch.no_grad()
def generate(model, tokenizer, prompts: list[str], max_new_tokens: int, batch_size: int,
             do_sample: bool = False, temperature: float = 1.0, top_p: float = 1.0) -> list[str]:
    """Left-padded batched ``generate`` with the KV cache; returns the decoded completions."""
    from klear_lab.rl.rollout.hf import clean_generation_config

    was_training = model.training
    model.eval()
    out: list[str] = []
    device = next(model.parameters()).device
    with clean_generation_config(model, do_sample):  # no hub penalties / min_p / top_k in the protocol
        for start in range(0, len(prompts), batch_size):
            out += _generate_batch(model, tokenizer, prompts[start:start + batch_size], max_new_tokens, device,
                                   do_sample, temperature, top_p)
    model.train(was_training)
    return [_strip_special(text, tokenizer) for text in out]


def _generate_batch(model, tokenizer, prompts: list[str], max_new_tokens: int, device, do_sample: bool,
                    temperature: float, top_p: float) -> list[str]:
    """One left-padded ``generate`` call: the decoded completions (special tokens kept)."""
    chunk = [prompt_ids(tokenizer, p) for p in prompts]
    width = max(len(c) for c in chunk)
    ids = torch.full((len(chunk), width), tokenizer.pad_token_id, dtype=torch.long)  # [b, P]
    mask = torch.zeros_like(ids)
    for i, c in enumerate(chunk):
        ids[i, width - len(c):] = torch.tensor(c)
        mask[i, width - len(c):] = 1
    gen = model.generate(  # the clean generation config sets top_k 0 when sampling: no top-k cut
        input_ids=ids.to(device), attention_mask=mask.to(device), max_new_tokens=max_new_tokens,
        do_sample=do_sample, temperature=temperature if do_sample else None,
        top_p=top_p if do_sample and top_p < 1.0 else None,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    return tokenizer.batch_decode(gen[:, width:], skip_special_tokens=False)


def _cuda_ids(device: torch.device) -> list[int]:
    """The CUDA device whose RNG ``fork_rng`` must save and restore (none on CPU)."""
    if device.type != "cuda":
        return []
    return [device.index if device.index is not None else torch.cuda.current_device()]


def _strip_special(text: str, tokenizer) -> str:
    """Cut at EOS and drop padding, keeping ``<think>`` tags (they are graded)."""
    eos = tokenizer.eos_token
    if eos and eos in text:
        text = text[: text.index(eos)]
    return text.replace(tokenizer.pad_token or "\0", "")


def evaluate(model, tokenizer, records: list[Record], rewards: dict[str, object],
             max_new_tokens: int, batch_size: int, sampling: Sampling = GREEDY) -> EvalResult:
    """Decode ``sampling.samples`` completions of every record and verify each with ``rewards[record.task]``."""
    k = sampling.samples
    repeated = [r for r in records for _ in range(k)]  # [n * k], a record's samples adjacent
    prompts = [r.prompt for r in repeated]
    if sampling.temperature == 0:
        flat = generate(model, tokenizer, prompts, max_new_tokens, batch_size)
    else:
        with torch.random.fork_rng(devices=_cuda_ids(next(model.parameters()).device)):
            torch.manual_seed(sampling.seed)
            flat = generate(model, tokenizer, prompts, max_new_tokens, batch_size, do_sample=True,
                            temperature=sampling.temperature, top_p=sampling.top_p)
    ok = [False] * len(flat)
    for task, reward in rewards.items():
        idx = [i for i, r in enumerate(repeated) if r.task == task]
        if idx:
            scored = reward([flat[i] for i in idx], [repeated[i] for i in idx])
            for i, s in zip(idx, scored):
                ok[i] = bool(s.acc)
    return EvalResult(records, [flat[i * k:(i + 1) * k] for i in range(len(records))],
                      [ok[i * k:(i + 1) * k] for i in range(len(records))])
