"""rl_objective: SFT-on-positives, entropy, KL terms; accumulation exactness."""

from __future__ import annotations

import pytest
import torch

from klear_lab.rl.aggregation.seq_mean_token_mean import SeqMeanTokenMean
from klear_lab.rl.aggregation.seq_mean_token_sum import SeqMeanTokenSum
from klear_lab.rl.aggregation.token_mean import TokenMean
from klear_lab.rl.clip.gppo import GPPOClip
from klear_lab.rl.kl import kl_k3
from klear_lab.rl.objective import ObjectiveWeights, rl_objective
from klear_lab.rl.types import AggContext, PolicyBatch

MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
POSITIVE = torch.tensor([True, False, True])


def make(seed=0, **extra):
    torch.manual_seed(seed)
    logp = (-torch.rand(3, 3, dtype=torch.float64) - 0.1).requires_grad_()
    old = logp.detach() + 0.3 * torch.randn(3, 3, dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0, 0.5], dtype=torch.float64)
    return PolicyBatch(logp=logp, old_logp=old, adv=adv, mask=MASK, **extra)


CTX = AggContext.from_mask(MASK)
POS_CTX = AggContext.from_mask(MASK * POSITIVE[:, None])


def test_alpha_zero_is_pure_policy_loss():
    batch = make(positive=POSITIVE)
    loss, metrics = rl_objective(GPPOClip(), TokenMean(), batch, CTX, ObjectiveWeights(alpha=0.0), POS_CTX)
    pg = TokenMean()(GPPOClip()(batch.logp, batch.old_logp, batch.adv, MASK).loss, MASK, CTX)
    torch.testing.assert_close(loss, pg)
    assert "positive_loss" in metrics  # still logged


def test_alpha_term_counts_only_positives():
    grads = {}
    for alpha in (0.0, 0.1):
        batch = make(positive=POSITIVE)
        loss, _ = rl_objective(GPPOClip(), TokenMean(), batch, CTX, ObjectiveWeights(alpha=alpha), POS_CTX)
        loss.backward()
        grads[alpha] = (loss.detach(), batch.logp.grad, batch.logp.detach())
    (l0, g0, logp), (l1, g1, _) = grads[0.0], grads[0.1]
    pos_mask = MASK * POSITIVE[:, None]  # 3 + 1 = 4 positive tokens
    torch.testing.assert_close(l1 - l0, 0.1 * -(logp * pos_mask).sum() / 4)
    torch.testing.assert_close(g1 - g0, -0.1 * pos_mask / 4)  # zero on the negative row and padding


def test_entropy_and_kl_terms():
    torch.manual_seed(1)
    entropy = torch.rand(3, 3, dtype=torch.float64)
    ref = -torch.rand(3, 3, dtype=torch.float64)
    base = make()
    w = ObjectiveWeights(alpha=0.0, entropy_coef=0.01, kl_coef=0.05, kl_estimator="k3")
    loss, metrics = rl_objective(GPPOClip(), TokenMean(), make(entropy=entropy, ref_logp=ref), CTX, w)
    pg, _ = rl_objective(GPPOClip(), TokenMean(), base, CTX, ObjectiveWeights(alpha=0.0))
    ent = (entropy * MASK).sum() / 6
    kl = (kl_k3(base.logp.detach(), ref) * MASK).sum() / 6
    torch.testing.assert_close(loss.detach(), pg.detach() - 0.01 * ent + 0.05 * kl)
    torch.testing.assert_close(metrics["entropy"], ent)
    torch.testing.assert_close(metrics["kl"], kl)
    assert {"loss", "pg_loss", "num_tokens", "clipfrac_high", "ratio_mean"} <= set(metrics)


def test_extra_terms_are_logged_as_token_means_under_any_aggregation():
    """The loss weighs entropy and the positives' NLL as the aggregation does (3 + 2 + 1 tokens, 3 rows:
    seq-mean-token-sum sums each row's tokens); the log is their token mean, comparable across arms."""
    entropy = torch.full((3, 3), 1.0, dtype=torch.float64)
    w = ObjectiveWeights(alpha=0.1, entropy_coef=0.01)
    batch = make(positive=POSITIVE, entropy=entropy)
    loss, metrics = rl_objective(GPPOClip(), SeqMeanTokenSum(), batch, CTX, w, POS_CTX)
    pg = SeqMeanTokenSum()(GPPOClip()(batch.logp, batch.old_logp, batch.adv, MASK).loss, MASK, CTX)
    pos_mask = MASK * POSITIVE[:, None]  # rows 0 and 2: 3 + 1 tokens
    nll_per_row = -(batch.logp.detach() * pos_mask).sum() / 2  # seq-mean over the 2 positive rows
    torch.testing.assert_close(loss.detach(), pg.detach() + 0.1 * nll_per_row - 0.01 * 6 / 3)
    torch.testing.assert_close(metrics["entropy"], torch.tensor(1.0, dtype=torch.float64))
    torch.testing.assert_close(metrics["positive_loss"], -(batch.logp.detach() * pos_mask).sum() / 4)


def test_accumulation_equals_full_batch():
    w = ObjectiveWeights(alpha=0.1)
    full = make(positive=POSITIVE)
    agg = SeqMeanTokenMean()
    full_loss, _ = rl_objective(GPPOClip(), agg, full, CTX, w, POS_CTX)
    full_loss.backward()
    leaf = full.logp.detach().clone().requires_grad_()
    total = 0.0
    for rows in (slice(0, 1), slice(1, 3)):
        part = PolicyBatch(leaf[rows], full.old_logp[rows], full.adv[rows], MASK[rows], POSITIVE[rows])
        loss, _ = rl_objective(GPPOClip(), agg, part, CTX, w, POS_CTX)
        loss.backward()
        total = total + loss.detach()
    torch.testing.assert_close(total, full_loss.detach())
    torch.testing.assert_close(leaf.grad, full.logp.grad)


@pytest.mark.parametrize(
    ("batch_kw", "weights", "match"),
    [
        ({}, ObjectiveWeights(alpha=0.1), "positive"),
        ({"positive": POSITIVE}, ObjectiveWeights(alpha=0.1), "pos_ctx"),
        ({}, ObjectiveWeights(alpha=0.0, entropy_coef=0.01), "entropy"),
        ({}, ObjectiveWeights(alpha=0.0, kl_coef=0.1), "ref_logp"),
    ],
)
def test_missing_inputs_raise(batch_kw, weights, match):
    with pytest.raises(ValueError, match=match):
        rl_objective(GPPOClip(), TokenMean(), make(**batch_kw), CTX, weights)


def test_weights_validation():
    with pytest.raises(ValueError, match="alpha"):
        ObjectiveWeights(alpha=-0.1)
    with pytest.raises(ValueError, match="kl_estimator"):
        ObjectiveWeights(kl_estimator="k5")
