"""Data-parallel RL arithmetic: minibatch plans shared by ranks, global-count losses, merged metrics."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from klear_lab.registry import AGGREGATION
from klear_lab.rl.clip.gppo import GPPOClip
from klear_lab.rl.data_parallel import (
    merge_rank_metrics,
    pooled_std,
    rank_minibatches,
    rank_prompts,
    weights_fingerprint,
    zero_loss,
)
from klear_lab.rl.objective import ObjectiveWeights, rl_objective
from klear_lab.rl.types import AggContext, PolicyBatch


def test_one_rank_cuts_consecutive_minibatches():
    assert rank_minibatches([0, 2, 3, 5, 7], [5], 0, 2) == [[0, 2], [3, 5], [7]]
    assert rank_minibatches([], [0], 0, 2) == []


def test_ranks_share_the_update_count_and_each_global_minibatch_has_the_configured_size():
    kept = {0: [1, 4, 6], 1: [2]}  # rank -> kept group indices (its own numbering)
    counts = [len(kept[0]), len(kept[1])]
    plans = {r: rank_minibatches(kept[r], counts, r, 2) for r in kept}
    assert plans == {0: [[1], [4, 6]], 1: [[2], []]}  # interleaved: (0,1) (1,2) | (0,4) (0,6)
    for r in kept:  # every kept group exactly once, in order
        assert [g for chunk in plans[r] for g in chunk] == kept[r]
    assert [len(a) + len(b) for a, b in zip(plans[0], plans[1])] == [2, 2]


def test_no_updates_when_no_rank_kept_a_group_even_if_the_minibatch_is_larger():
    assert rank_minibatches([], [0, 0], 1, 4) == []
    assert rank_minibatches([3], [0, 1], 1, 4) == [[3]]
    assert rank_minibatches([], [0, 1], 0, 4) == [[]]  # rank 0 still joins the one update


def test_rank_prompts_partition_the_step():
    batch = list(range(8))
    shares = [rank_prompts(batch, r, 2) for r in range(2)]
    assert shares == [[0, 2, 4, 6], [1, 3, 5, 7]]


def test_merged_metrics_sum_mean_max_min_and_tolerate_missing_keys():
    ranks = [({"train/loss": 0.25, "rl/clipfrac": 0.1, "reward/mean": 1.0, "rl/response_len_max": 7.0,
               "rl/ratio_min": 0.9, "perf/step_s": 2.0}, ["train/loss", "rl/clipfrac"], ["perf/step_s"]),
             ({"reward/mean": 3.0, "rl/response_len_max": 9.0, "rl/ratio_min": 0.8, "perf/step_s": 3.0}, [],
              ["perf/step_s"])]
    assert merge_rank_metrics(ranks) == {"train/loss": 0.25, "rl/clipfrac": 0.1, "reward/mean": 2.0,
                                         "rl/response_len_max": 9.0, "rl/ratio_min": 0.8, "perf/step_s": 3.0}
    both = [({"train/loss": 0.25}, ["train/loss"], []), ({"train/loss": 0.5}, ["train/loss"], [])]
    assert merge_rank_metrics(both) == {"train/loss": 0.75}


def test_pooled_std_is_the_std_of_the_whole_batch():
    scores = torch.tensor([[0.0, 1.0, 1.0, 0.5], [2.0, 2.0, 3.0, 0.0], [1.0, 1.0, 1.0, 1.0]],
                          dtype=torch.float64)  # 3 ranks x 4 responses
    got = pooled_std(scores.mean(1).tolist(), scores.std(1).tolist(), 4)
    assert got == pytest.approx(float(scores.std()), rel=1e-12)  # 0.856
    assert float(scores.std(1).mean()) == pytest.approx(0.579, abs=1e-3)  # the mean of the ranks' spreads
    assert pooled_std([1.0], [0.0], 1) == 0.0


def test_weights_fingerprint_tells_apart_models_that_differ_in_one_weight():
    a, b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    b.load_state_dict(a.state_dict())
    torch.testing.assert_close(weights_fingerprint(a), weights_fingerprint(b), rtol=0, atol=0)
    with torch.no_grad():
        b.weight[0, 0] += 1e-3
    assert not torch.allclose(weights_fingerprint(a), weights_fingerprint(b), rtol=1e-9, atol=0)
    assert weights_fingerprint(a).dtype == torch.float64 and weights_fingerprint(a).shape == (2,)


def test_zero_loss_gives_every_trainable_parameter_a_zero_gradient():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    model[1].bias.requires_grad_(False)
    loss = zero_loss(model)
    loss.backward()
    assert float(loss.detach()) == 0.0
    for p in model.parameters():
        if p.requires_grad:
            assert p.grad is not None and torch.count_nonzero(p.grad) == 0
    assert model[1].bias.grad is None


# --- the loss of a global minibatch split over ranks: ranks use summed counts and scale by world ---

def policy_batch(theta: torch.Tensor, rows: slice) -> PolicyBatch:
    """Six responses of up to 4 tokens whose log-probs depend on one shared parameter ``theta`` [3]."""
    g = torch.Generator().manual_seed(0)
    feats = torch.randn(6, 4, 3, generator=g, dtype=torch.float64)  # [N, T, 3]
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0]],
                        dtype=torch.float64)
    logp = -F.softplus(feats @ theta) * mask  # [N, T]
    old = (logp.detach() + 0.4 * torch.randn(6, 4, generator=g, dtype=torch.float64)) * mask  # off-policy
    adv = torch.tensor([1.0, -0.5, 0.7, -1.2, 0.3, 0.9], dtype=torch.float64)
    positive = torch.tensor([True, False, True, False, False, True])
    return PolicyBatch(logp=logp[rows], old_logp=old[rows], adv=adv[rows], mask=mask[rows], positive=positive[rows])


def contexts(batches: list[PolicyBatch]) -> tuple[AggContext, AggContext]:
    """Counts summed over the ranks' parts, as the module's all-reduce makes them."""
    parts = [(AggContext.from_mask(b.mask, 4), AggContext.from_mask(b.mask * b.positive[:, None], 4)) for b in batches]
    ctx, pos = (AggContext(sum(p[i].num_tokens for p in parts), sum(p[i].num_seqs for p in parts), 4)
                for i in (0, 1))
    return ctx, pos


@pytest.mark.parametrize("aggregation", sorted(AGGREGATION.names()))
def test_ranks_with_summed_counts_give_the_whole_minibatch_gradient(aggregation):
    agg, clip, weights = AGGREGATION.get(aggregation)(), GPPOClip(), ObjectiveWeights(alpha=0.1)
    theta = torch.tensor([0.3, -0.2, 0.5], dtype=torch.float64, requires_grad=True)
    whole = policy_batch(theta, slice(None))
    loss, _ = rl_objective(clip, agg, whole, *contexts([whole])[:1], weights, contexts([whole])[1])
    (expected,) = torch.autograd.grad(loss, theta)

    world, shares = 2, [slice(0, 4), slice(4, 6)]  # uneven: 4 rows on rank 0, 2 on rank 1
    ctx, pos = contexts([policy_batch(theta, s) for s in shares])
    rank_grads = []
    for s in shares:
        part, _ = rl_objective(clip, agg, policy_batch(theta, s), ctx, weights=weights, pos_ctx=pos)
        rank_grads.append(torch.autograd.grad(part * world, theta)[0])
    ddp_mean = torch.stack(rank_grads).mean(0)  # what DDP's all-reduce leaves on every rank
    torch.testing.assert_close(ddp_mean, expected)
    assert not torch.allclose(rank_grads[0] / world, expected)  # one rank alone is not the answer


def test_a_step_never_holds_one_prompt_twice_and_each_epoch_holds_every_prompt():
    """At an epoch boundary the last epoch's leftovers joined a fresh shuffle: 30 prompts in batches of 16 put
    a prompt twice in a step (two groups of it, normalised apart)."""
    from klear_lab.stages.rl import prompt_batches

    batches = prompt_batches(list(range(30)), 16, 15, seed=0)  # 240 draws: 8 epochs
    assert all(len(set(b)) == 16 for b in batches)
    drawn = [i for b in batches for i in b]
    assert all(sorted(drawn[e * 30:(e + 1) * 30]) == list(range(30)) for e in range(8))
    assert prompt_batches(list(range(3)), 4, 2, seed=0)[0].count(0) >= 1  # a pool smaller than a step repeats


def test_max_kept_trains_on_the_first_survivors_in_full_minibatches():
    """The paper trains on the first 128 of 256 prompts that survive the filter: 17 kept with minibatch 16
    made a full update and one of a single group (Adam moves as far on it)."""
    from klear_lab.rl.data_parallel import first_survivors, rank_minibatches

    kept = list(range(0, 34, 2))  # 17 groups survived
    assert [len(mb) for mb in rank_minibatches(kept, [17], 0, 16)] == [16, 1]
    assert first_survivors([kept], 16) == [kept[:16]] and first_survivors([kept[:3]], 16) == [kept[:3]]
    # two ranks: rank r's local prompt j is the step's prompt 2j + r; rank 0 kept 0, 1 (prompts 0, 2) and
    # rank 1 kept 5 (prompt 11): the first two survivors are prompts 0 and 2, both rank 0's
    assert first_survivors([[0, 1], [5]], 2) == [[0, 1], []]
    assert first_survivors([[3], [0, 4]], 2) == [[3], [0]]  # prompts 6 | 1, 9: the first two are 1 and 6
