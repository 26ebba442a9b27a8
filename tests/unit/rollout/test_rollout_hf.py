"""``hf`` rollout engine: layout, masks, sampling log-probs, greedy parity, determinism; vllm's error path."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from klear_lab.data.sft import prompt_ids
from klear_lab.errors import ConfigError
from klear_lab.models.tokenizer import train_tokenizer
from klear_lab.registry import MODEL, ROLLOUT, SOURCE
from klear_lab.rl.hf_sampling import SampleLogProbs, penalise_repeats
from klear_lab.rl.rollout.base import Rollout, prompt_seeds

MAX_NEW = 24
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def world():
    """Tokenizer, 4 prompts and a tiny Qwen2 whose LM head favours EOS (so some rows finish)."""
    recs = SOURCE.build({"name": "arith_r1", "n_prompts": 40}).records(0, "train")
    tok = train_tokenizer([r.prompt + r.response for r in recs], vocab_size=300)
    torch.manual_seed(0)
    model = MODEL.build({"name": "qwen2", "size": "2m", "tie_word_embeddings": False}).build(tok)
    head = torch.nn.Linear(model.lm_head.in_features, model.lm_head.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.zero_()
        head.bias[tok.eos_token_id] = 3.0  # P(EOS) ~ 6 % per step
    model.lm_head = head
    return tok, model, [r.prompt for r in recs[:4]]


def _engine(world, batch_size=64):
    tok, model, _ = world
    return ROLLOUT.build({"name": "hf", "batch_size": batch_size}).start(model, tok)


def _teacher_forced(model, rollout: Rollout, temperature: float, ranks: list | None = None) -> list:
    """Per row: log_softmax(logits / T) at the generated tokens, one unpadded forward each.

    ``ranks`` (if given) collects each sampled token's rank among the logits (0 = argmax).
    """
    out = []
    with torch.no_grad():
        for i, p in enumerate(rollout.prompt_ids):
            k = int(rollout.response_lengths[i])
            seq = torch.tensor([p + rollout.response_ids[i, :k].tolist()])
            logits = model(seq).logits[0, len(p) - 1:-1].float()  # [k, V]
            logp = torch.log_softmax(logits / temperature, dim=-1)
            chosen = logp.gather(-1, seq[0, len(p):, None])  # [k, 1]
            out.append(chosen.squeeze(-1))
            if ranks is not None:
                ranks += (logp > chosen).sum(-1).tolist()
    return out


def test_layout_masks_and_finished_flags(world):
    tok, _, prompts = world
    ro = _engine(world).generate(prompts, n=3, max_new_tokens=MAX_NEW, temperature=1.0, seed=1)
    n_seq = len(prompts) * 3
    assert ro.response_ids.shape == ro.response_mask.shape == ro.sample_logp.shape
    assert ro.response_ids.shape[0] == n_seq and ro.response_ids.shape[1] <= MAX_NEW
    assert ro.response_ids.dtype == torch.long and ro.response_mask.dtype == torch.float32
    assert ro.group_index.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert ro.prompt_ids == [prompt_ids(tok, prompts[i // 3]) for i in range(n_seq)]
    assert 0 < int(ro.finished.sum()) < n_seq, "fixture should give both finished and truncated rows"
    eos = tok.eos_token_id
    for i in range(n_seq):
        k = int(ro.response_lengths[i])
        row = ro.response_ids[i]
        assert ro.response_mask[i, :k].eq(1).all() and ro.response_mask[i, k:].eq(0).all()
        assert row[k:].eq(tok.pad_token_id).all() and ro.sample_logp[i, k:].eq(0).all()
        assert (ro.sample_logp[i, :k] < 0).all()
        if ro.finished[i]:
            assert row[k - 1] == eos and not row[:k - 1].eq(eos).any()
        else:
            assert k == MAX_NEW and not row[:k].eq(eos).any()
        body = row[:k - 1] if ro.finished[i] else row[:k]
        assert ro.texts[i] == tok.decode(body.tolist(), skip_special_tokens=False).replace(tok.pad_token, "")


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sample_logp_equals_teacher_forced_logp(world, temperature):
    _, model, prompts = world
    ro = _engine(world, batch_size=5).generate(prompts, n=3, max_new_tokens=MAX_NEW, temperature=temperature,
                                               seed=2)
    ranks: list[int] = []
    for i, ref in enumerate(_teacher_forced(model, ro, temperature, ranks)):
        torch.testing.assert_close(ro.sample_logp[i, :len(ref)], ref, atol=1e-4, rtol=0)
    # full-vocabulary sampling: no hidden top-k (transformers' global default is top_k=50)
    assert max(ranks) >= 100


def test_top_p_logp_is_the_renormalised_nucleus(world):
    """With top_p < 1 the reported log-prob is under the truncated, renormalised distribution."""
    _, model, prompts = world
    ro = _engine(world).generate(prompts, n=2, max_new_tokens=MAX_NEW, temperature=1.0, top_p=0.5, seed=3)
    gaps = []
    for i, ref in enumerate(_teacher_forced(model, ro, 1.0)):
        gap = ro.sample_logp[i, :len(ref)] - ref  # = -log(nucleus mass) >= 0
        assert (gap > -1e-5).all()
        gaps.append(gap)
    gaps = torch.cat(gaps)
    assert gaps.max() > 0.1 and (gaps <= -torch.log(torch.tensor(0.5)) + 1e-4).all()


def test_top_k_samples_among_the_k_likeliest_and_renormalises(world):
    _, model, prompts = world
    ro = _engine(world).generate(prompts, n=3, max_new_tokens=MAX_NEW, temperature=1.0, top_k=3, seed=4)
    ranks: list[int] = []
    gaps = torch.cat([ro.sample_logp[i, :len(ref)] - ref
                      for i, ref in enumerate(_teacher_forced(model, ro, 1.0, ranks))])  # = -log(top-3 mass)
    assert 1 <= max(ranks) <= 2 and (gaps > -1e-5).all() and gaps.max() > 0.1  # without top_k: >= 100
    one = _engine(world).generate(prompts, n=2, max_new_tokens=MAX_NEW, temperature=1.0, top_k=1, seed=4)
    greedy = _engine(world).generate(prompts, n=2, max_new_tokens=MAX_NEW, temperature=0.0)
    assert one.texts == greedy.texts


def test_repetition_penalty_on_hand_computed_scores():
    scores = torch.tensor([[2.0, -1.0, 0.5, 3.0], [2.0, -1.0, 0.5, 3.0]])  # [b=2, V=4]
    ids = torch.tensor([[3, 3, 1, 2], [3, 0, 0, 3]])  # row 0: two pads (token 3) on the left
    out = penalise_repeats(scores, ids, starts=[2, 0], penalty=2.0)
    torch.testing.assert_close(out, torch.tensor([[2.0, -2.0, 0.25, 3.0], [1.0, -1.0, 0.5, 1.5]]))


def test_repetition_penalty_matches_transformers_unbatched(make_tiny_lm):
    """Batched and left-padded, greedy with a penalty decodes what transformers' own processor does
    on each prompt alone (its prompt and response penalised, never the padding)."""
    tok, model, recs = make_tiny_lm(4)  # no EOS bias: greedy responses run long enough to repeat
    prompts = [r.prompt for r in recs]
    ro = _engine((tok, model, prompts), batch_size=4).generate(prompts, n=1, max_new_tokens=MAX_NEW, temperature=0.0,
                                               repetition_penalty=1.8)
    expected, plain = [], []
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([prompt_ids(tok, p)])
            kw = {"max_new_tokens": MAX_NEW, "do_sample": False, "pad_token_id": tok.pad_token_id,
                  "eos_token_id": tok.eos_token_id}
            expected.append(model.generate(ids, repetition_penalty=1.8, **kw)[0, ids.shape[1]:])
            plain.append(model.generate(ids, repetition_penalty=1.0, **kw)[0, ids.shape[1]:])
    for i, ref in enumerate(expected):
        k = int(ro.response_lengths[i])
        assert ro.response_ids[i, :k].tolist() == ref.tolist()  # one prompt per call: no padding in ref
    assert any(not torch.equal(e, q) for e, q in zip(expected, plain))  # the penalty changes these decodes


def test_greedy_matches_unbatched_argmax(world, reference_greedy):
    tok, model, prompts = world
    bias = model.lm_head.bias
    with torch.no_grad():
        bias[tok.eos_token_id] = 0.0  # greedy would pick the favoured EOS first: all texts empty
    try:
        ro = _engine(world, batch_size=4).generate(prompts, n=1, max_new_tokens=MAX_NEW, temperature=0.0)
        assert ro.texts == reference_greedy(model.eval(), tok, prompts, MAX_NEW)
        assert len(set(ro.texts)) == len(prompts) and min(map(len, ro.texts)) > 0
        for i, ref in enumerate(_teacher_forced(model, ro, 1.0)):  # greedy reports log_softmax(logits)
            torch.testing.assert_close(ro.sample_logp[i, :len(ref)], ref, atol=1e-4, rtol=0)
    finally:
        with torch.no_grad():
            bias[tok.eos_token_id] = 3.0


def test_seed_determinism_and_rng_isolation(world):
    _, _, prompts = world
    engine = _engine(world, batch_size=5)
    state = torch.get_rng_state()
    a = engine.generate(prompts, n=2, max_new_tokens=MAX_NEW, seed=7)
    assert torch.equal(torch.get_rng_state(), state), "a seeded call must not move the caller's RNG"
    engine.generate(prompts, n=1, max_new_tokens=4, temperature=0.0)
    assert torch.equal(torch.get_rng_state(), state), "greedy decoding uses no RNG"
    b = engine.generate(prompts, n=2, max_new_tokens=MAX_NEW, seed=7)
    c = engine.generate(prompts, n=2, max_new_tokens=MAX_NEW, seed=8)
    assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.sample_logp, b.sample_logp)
    assert a.texts == b.texts and not torch.equal(a.response_ids[:, :4], c.response_ids[:, :4])


def test_a_prompts_samples_do_not_depend_on_batching_or_other_prompts(world):
    """Each row draws from its own generator (prompt seed + sample index), as vLLM's per-request seeds do."""
    _, _, prompts = world
    whole = _engine(world, batch_size=64).generate(prompts, n=3, max_new_tokens=MAX_NEW, seed=11)
    chunked = _engine(world, batch_size=5).generate(prompts, n=3, max_new_tokens=MAX_NEW, seed=11)
    assert whole.texts == chunked.texts and torch.equal(whole.response_ids, chunked.response_ids)
    torch.testing.assert_close(whole.sample_logp, chunked.sample_logp, atol=1e-5, rtol=0)  # batched matmul rounding
    seeds = prompt_seeds(11, len(prompts))
    alone = _engine(world).generate([prompts[2]], n=3, max_new_tokens=MAX_NEW, seed=[seeds[2]])
    assert alone.texts == whole.texts[6:9] and len(set(whole.texts)) > 6  # rows differ from one another
    reordered = _engine(world, batch_size=4).generate(prompts[::-1], n=3, max_new_tokens=MAX_NEW, seed=seeds[::-1])
    assert reordered.texts == [t for i in (3, 2, 1, 0) for t in whole.texts[3 * i:3 * i + 3]]
    with pytest.raises(ValueError, match="2 per-prompt seeds for 4 prompts"):
        _engine(world).generate(prompts, n=1, max_new_tokens=4, seed=[1, 2])


def test_each_row_samples_its_distribution():
    """4,000 draws per row match the row's probabilities; a token outside the nucleus (-inf) never comes."""
    probs = torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.0], [0.0, 0.0, 0.5, 0.25, 0.25]])  # [b=2, V=5]
    sampler = SampleLogProbs(temperature=1.0, top_p=1.0, seeds=[3, 4], max_new_tokens=4000)
    draws = torch.stack([sampler._draw(probs.log()) for _ in range(4000)])  # [4000, 2]
    freq = torch.stack([torch.bincount(draws[:, r], minlength=5) / 4000 for r in range(2)])  # [2, 5]
    torch.testing.assert_close(freq, probs, atol=0.03, rtol=0)  # ~4 standard errors
    assert freq[0, 4] == 0 and freq[1, :2].sum() == 0
    again = SampleLogProbs(temperature=1.0, top_p=1.0, seeds=[3, 9], max_new_tokens=4000)
    first = torch.stack([again._draw(probs.log()) for _ in range(50)])
    assert torch.equal(first[:, 0], draws[:50, 0]) and not torch.equal(first[:, 1], draws[:50, 1])
    with pytest.raises(RuntimeError, match="past max_new_tokens 4000"):
        sampler._draw(probs.log())


def test_nan_logits_stop_the_rollout():
    """transformers' multinomial used to raise on NaN probabilities; the per-row draw must not pick a token."""
    logp = torch.log_softmax(torch.tensor([[0.0, 1.0, 2.0], [float("nan"), 0.0, 0.0]]), dim=-1)
    sampler = SampleLogProbs(temperature=1.0, top_p=1.0, seeds=[1, 2], max_new_tokens=4)
    with pytest.raises(RuntimeError, match="decode step 0: the policy's next-token probabilities are NaN"):
        sampler._draw(logp)


@pytest.mark.parametrize("training", [True, False])
def test_model_mode_is_restored(world, training):
    _, model, prompts = world
    model.train(training)
    _engine(world).generate(prompts[:1], n=1, max_new_tokens=4, seed=0)
    assert model.training is training
    model.eval()


def test_token_id_prompts_pass_through(world):
    tok, _, prompts = world
    ids = prompt_ids(tok, prompts[0])
    a = _engine(world).generate([ids], n=2, max_new_tokens=8, seed=0)
    b = _engine(world).generate(prompts[:1], n=2, max_new_tokens=8, seed=0)
    assert a.prompt_ids == b.prompt_ids and torch.equal(a.response_ids, b.response_ids)


@pytest.mark.parametrize("kwargs", [{"n": 0}, {"max_new_tokens": 0}, {"temperature": -1.0}, {"top_p": 0.0},
                                    {"top_p": 1.5}, {"top_k": -1}, {"top_k": 2.5}, {"repetition_penalty": 0.0}])
def test_bad_sampling_arguments(world, kwargs):
    args = {"n": 1, "max_new_tokens": 4, **kwargs}
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        _engine(world).generate(world[2][:1], **args)


def test_registry_entries_and_config_errors():
    assert {"hf", "vllm"} <= set(ROLLOUT.names())
    assert ROLLOUT.params("hf") == {"batch_size": 64}
    ROLLOUT.get("hf").check_available()
    with pytest.raises(ConfigError, match="batch_size"):
        ROLLOUT.build({"name": "hf", "batch_size": 0})
    with pytest.raises(ConfigError, match="weight_sync"):
        ROLLOUT.build({"name": "vllm", "weight_sync": "nccl"})


def test_a_vllm_call_that_cannot_fit_the_engines_context_is_refused():
    """vLLM would stop such responses at max_model_len and report them truncated (no vLLM needed here)."""
    from klear_lab.config.compose import compose
    from klear_lab.rl.rollout.vllm import check_room

    check_room([[1] * 30, [1] * 50], max_new_tokens=50, max_model_len=100, where="x")  # 50 + 50 fits exactly
    check_room([[1] * 500], max_new_tokens=50, max_model_len=None, where="x")  # engine context unknown: no check
    with pytest.raises(ConfigError, match=r"1 of 2 prompts in data.sources \(the longest 51 tokens\) \+ "
                                          r"max_new_tokens 50 exceed the vLLM engine's context of 100 tokens"):
        check_room([[1] * 30, [1] * 51], max_new_tokens=50, max_model_len=100, where="data.sources")
    rl = ROOT / "experiments/quickstart/rl.yaml"
    with pytest.raises(ConfigError, match=r"max_model_len \(64\) leaves no room .* rl.max_new_tokens \(64\)"):
        compose(rl, ["rl.rollout.name=vllm", "rl.rollout.max_model_len=64", "rl.max_new_tokens=64"])
    assert compose(rl, ["rl.rollout.name=vllm", "rl.rollout.max_model_len=0"])["rl"]["rollout"]["max_model_len"] == 0


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_vllm_missing_gives_install_hint_before_any_model(world):
    import sys

    assert "vllm" not in sys.modules  # importing the engine module did not import vllm
    engine = ROLLOUT.build({"name": "vllm"})
    for call in (type(engine).check_available, lambda: engine.start(world[1], world[0])):
        with pytest.raises(ConfigError, match=r"klear-lab\[vllm\].*setup_vllm_cpu\.sh"):
            call()


def test_a_vllm_sample_ending_in_eos_at_the_length_cap_is_finished():
    """Some vLLM versions check the cap before EOS and say ``length``: the sample was counted truncated."""
    from types import SimpleNamespace

    from klear_lab.rl.rollout.vllm import _to_sample

    def completion(tokens, reason):
        return SimpleNamespace(token_ids=tokens, finish_reason=reason,
                               logprobs=[{t: SimpleNamespace(logprob=-0.5)} for t in tokens])

    assert _to_sample(completion([5, 6, 2], "length"), eos_ids=[2]).finished
    assert _to_sample(completion([5, 6, 2], "stop"), eos_ids=[2]).finished
    assert not _to_sample(completion([5, 6, 7], "length"), eos_ids=[2]).finished
