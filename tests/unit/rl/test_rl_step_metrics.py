"""How a step's micro-batches and updates add up to its logged metrics, and where its log-probs live."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from klear_lab.rl.step_metrics import accumulate, step_values, weight_micro_metrics
from klear_lab.rl.steps import response_logp


def test_extremes_are_extremes_over_micro_batches_and_updates():
    totals: dict[str, float] = {}
    # update 1: two micro-batches, 3/4 and 1/4 of the minibatch's tokens; update 2: one micro-batch
    for metrics, share in [({"ratio_max": 3.0, "ratio_min": 0.9, "clipfrac": 0.2, "pg_loss": 0.5}, 0.75),
                           ({"ratio_max": 1.0, "ratio_min": 0.5, "clipfrac": 0.6, "pg_loss": 0.25}, 0.25),
                           ({"ratio_max": 2.0, "ratio_min": 0.7, "clipfrac": 0.1, "pg_loss": 1.25}, 1.0)]:
        accumulate(totals, weight_micro_metrics(metrics, share))
    accumulate(totals, {"grad_norm": 1.0})
    accumulate(totals, {"grad_norm": 3.0})
    got = step_values(totals, updates=2)
    assert got["ratio_max"] == 3.0 and got["ratio_min"] == 0.5  # a token-weighted mean of maxima gave 2.0
    assert got["clipfrac"] == pytest.approx(((0.75 * 0.2 + 0.25 * 0.6) + 0.1) / 2)  # token-weighted per update
    assert got["pg_loss"] == pytest.approx((0.75 + 1.25) / 2)  # loss terms: global denominators, summed
    assert got["grad_norm"] == 2.0


def test_a_micro_batch_without_tokens_adds_no_extremes():
    """Its ratio statistics are a placeholder 1.0 (``clip_metrics`` of an empty mask), not a ratio."""
    totals: dict[str, float] = {}
    accumulate(totals, weight_micro_metrics({"ratio_max": 0.905, "ratio_min": 0.9, "clipfrac": 0.5}, 1.0))
    accumulate(totals, weight_micro_metrics({"ratio_max": 1.0, "ratio_min": 1.0, "clipfrac": 0.0}, 0.0))
    assert step_values(totals, updates=1) == {"ratio_max": 0.905, "ratio_min": 0.9, "clipfrac": 0.5}


def test_a_sequence_level_variants_fractions_add_up_over_sequences_not_tokens():
    """GSPO's clipfrac is a share of sequences: split into micro-batches, a 100-token clipped sequence
    and a 10-token unclipped one still make 0.5 (token weights gave 100/110)."""
    from klear_lab.rl.clip.gspo import GSPOClip

    clip = GSPOClip()
    mask = torch.zeros(2, 100)
    mask[0], mask[1, :10] = 1.0, 1.0
    old = torch.zeros(2, 100)
    logp = torch.where(torch.arange(2)[:, None] == 0, 0.01, 0.0).expand(2, 100)  # s_0 = e^0.01, s_1 = 1
    adv = torch.tensor([1.0, 1.0])
    whole = {k: float(v) for k, v in clip(logp, old, adv, mask).metrics.items()}
    assert whole["clipfrac"] == pytest.approx(0.5)
    totals: dict[str, float] = {}
    for row in (0, 1):
        part = {k: float(v) for k, v in clip(logp[row:row + 1], old[row:row + 1], adv[row:row + 1],
                                             mask[row:row + 1]).metrics.items()}
        accumulate(totals, weight_micro_metrics(part, float(mask[row].sum()) / 110, seq_share=0.5))
    got = step_values(totals, updates=1)
    for key in ("clipfrac", "clipfrac_high", "ratio_mean", "approx_kl", "ratio_max", "ratio_min"):
        assert got[key] == pytest.approx(whole[key], abs=1e-7), key


class _Model(torch.nn.Module):
    """Logits from an embedding: enough for ``response_logp`` on any device."""

    def __init__(self, vocab: int = 11, device: str = "cpu") -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, vocab, device=device)

    def forward(self, input_ids, attention_mask, use_cache=False):
        assert input_ids.device == attention_mask.device == self.emb.weight.device
        return SimpleNamespace(logits=self.emb(input_ids))


def test_log_probs_are_computed_on_the_model_device_from_host_rollouts():
    """Rollouts are host tensors; a policy on another device (here: meta) gets its rows there."""
    ids, mask = torch.tensor([[3, 4, 0], [5, 0, 0]]), torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    logp, entropy = response_logp(_Model(device="meta"), [[1, 2], [7]], ids, mask, pad_id=0, with_entropy=True)
    assert logp.device.type == entropy.device.type == "meta" and logp.shape == (2, 3)


def test_log_probs_teacher_force_each_response_token():
    torch.manual_seed(0)
    model = _Model()
    ids, mask = torch.tensor([[3, 4, 0], [5, 0, 0]]), torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    logp, _ = response_logp(model, [[1, 2], [7]], ids, mask, pad_id=0, temperature=2.0)
    table = torch.log_softmax(model.emb.weight.detach() / 2.0, -1)  # row = the previous token
    want = torch.tensor([[table[2, 3], table[3, 4], 0.0], [table[7, 5], 0.0, 0.0]])
    torch.testing.assert_close(logp.detach(), want)
