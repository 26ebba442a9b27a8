"""Chunked log-probs (``rl.logp_chunk_tokens``): the whole-response path's values and gradients, and
the models it refuses."""

from __future__ import annotations

import pytest
import torch
from transformers import Gemma2Config, Gemma2ForCausalLM, Qwen2Config, Qwen2ForCausalLM

from klear_lab.rl.steps import response_logp
from klear_lab.rl.token_stats import check_chunkable, check_head_composes

PROMPTS = [[1, 2, 3], [4], [5, 6, 7, 8, 9]]
RESPONSES = torch.tensor([[10, 11, 12, 13, 14, 15, 16], [17, 18, 0, 0, 0, 0, 0], [19, 20, 21, 22, 23, 0, 0]])
MASK = (torch.arange(7)[None, :] < torch.tensor([7, 2, 5])[:, None]).float()  # [3, 7]


def qwen2() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                        num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False))


def stats_and_grads(model, chunk: int) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    model.zero_grad()
    logp, entropy = response_logp(model, PROMPTS, RESPONSES, MASK, pad_id=0, temperature=0.7, with_entropy=True,
                                  chunk_tokens=chunk)
    weights = torch.linspace(-1.0, 2.0, 21).view(3, 7)  # any loss of both, so every gradient path counts
    ((logp * weights).sum() + (entropy * weights.flip(0)).sum()).backward()
    return logp.detach(), entropy.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("chunk", [1, 3, 7, 50])
def test_chunks_give_the_whole_responses_values_and_gradients(chunk):
    model = qwen2()
    logp, entropy, grads = stats_and_grads(model, 0)
    c_logp, c_entropy, c_grads = stats_and_grads(model, chunk)
    torch.testing.assert_close(c_logp, logp, rtol=0, atol=1e-5)
    torch.testing.assert_close(c_entropy, entropy, rtol=0, atol=1e-5)
    assert (logp[MASK == 0] == 0).all() and (c_logp[MASK == 0] == 0).all() and entropy[MASK == 1].min() > 0
    for g, c in zip(grads, c_grads, strict=True):
        torch.testing.assert_close(c, g, rtol=1e-4, atol=1e-6)
    with torch.no_grad():  # old / reference log-probs: no graph, same values
        again, none = response_logp(model, PROMPTS, RESPONSES, MASK, pad_id=0, temperature=0.7, chunk_tokens=chunk)
    torch.testing.assert_close(again, logp, rtol=0, atol=1e-5)
    assert none is None


def test_a_model_that_post_processes_its_logits_is_refused():
    """Gemma 2 soft-caps its logits: its LM head over its hidden states is not its logits."""
    check_head_composes(qwen2())
    torch.manual_seed(0)
    gemma = Gemma2ForCausalLM(Gemma2Config(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                           num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                                           final_logit_softcapping=0.5))
    with pytest.raises(ValueError, match="soft-capping"):
        check_head_composes(gemma)
    check_chunkable(qwen2())  # before training, without a forward (flash attention needs the GPU)
    with pytest.raises(ValueError, match="final_logit_softcapping=0.5"):
        check_chunkable(gemma)


@pytest.mark.parametrize("chunk", [0, 3])
def test_an_entropy_outside_the_loss_is_computed_outside_autograd(chunk):
    """With rl.entropy_coef 0 the entropy is only logged: no graph (and no [N, T, V] tensor kept) for it."""
    model = qwen2()
    logp, entropy = response_logp(model, PROMPTS, RESPONSES, MASK, pad_id=0, temperature=0.7, with_entropy=True,
                                  chunk_tokens=chunk, entropy_grad=False)
    assert logp.requires_grad and not entropy.requires_grad
    _, reference, _ = stats_and_grads(model, chunk)
    torch.testing.assert_close(entropy, reference, rtol=0, atol=1e-6)
