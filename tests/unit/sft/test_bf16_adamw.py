"""AdamW with stochastic rounding for bfloat16 weights: the rounding, the step, and what it fixes.

At the paper's RL learning rate (1e-6) a bfloat16 weight of a trained model (|w| ~ 0.02, spacing ~1.2e-4)
rounds an AdamW step back to itself: torch's AdamW on bf16 weights barely moves them.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from klear_lab.modules.bf16_adamw import StochasticRoundingAdamW, stochastic_round_to_bf16
from klear_lab.modules.optim import OptimSettings, configure_adamw, warn_lost_updates


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_rounds_to_a_neighbour_right_on_average(sign):
    x = torch.full((200_000,), sign * (1.0 + 2**-9))  # a quarter of the way from 1 to the next bf16, 1 + 2^-7
    r = stochastic_round_to_bf16(x, _gen()).float()
    assert set(r.unique().tolist()) == {sign * 1.0, sign * (1 + 2**-7)}
    assert (r.abs() > 1).float().mean().item() == pytest.approx(0.25, abs=0.005)
    assert (r.mean() - x[0]).abs().item() < 4e-5  # the mean's std is 7.6e-6 here; rounding to nearest: 2e-3


def test_exact_and_special_values_stay():
    x = torch.tensor([0.0, -0.0, 1.0, -3.5, 2.0**-130, float("inf"), -float("inf"), float("nan")])
    r = stochastic_round_to_bf16(x, _gen())
    assert r.dtype == torch.bfloat16
    assert torch.equal(r[:7].float(), x[:7]) and r[7].isnan()


def _linear_pair(dtype=torch.float32):
    torch.manual_seed(0)
    a = torch.nn.Linear(6, 4).to(dtype)
    return a, copy.deepcopy(a)


def _steps(model, opt, n, seed=1):
    g = _gen(seed)
    for _ in range(n):
        opt.zero_grad()
        x = torch.randn(5, 6, generator=g).to(next(model.parameters()).dtype)
        model(x).float().pow(2).sum().backward()
        opt.step()


def test_float32_weights_take_torch_adamw_steps_exactly():
    a, b = _linear_pair()
    groups = lambda m: [{"params": [m.weight], "weight_decay": 0.1}, {"params": [m.bias], "weight_decay": 0.0}]  # noqa: E731
    _steps(a, torch.optim.AdamW(groups(a), lr=1e-2, betas=(0.9, 0.95), foreach=False), 6)
    _steps(b, StochasticRoundingAdamW(groups(b), lr=1e-2, betas=(0.9, 0.95)), 6)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)


def test_a_non_contiguous_weight_is_updated_in_place():
    base = torch.randn(3, 4)
    ref, mine = torch.nn.Parameter(base.clone()), torch.nn.Parameter(base.clone().t().contiguous().t())
    assert not mine.is_contiguous()
    for p, opt in ((ref, torch.optim.AdamW([ref], lr=0.1, foreach=False)),
                   (mine, StochasticRoundingAdamW([mine], lr=0.1))):
        p.grad = torch.ones(3, 4)
        opt.step()
    assert torch.equal(ref, mine) and not mine.is_contiguous()


def _drift(kind: str, lr: float = 1e-6, steps: int = 100) -> torch.Tensor:
    """The update of 4,096 weights (std 0.02) after ``steps`` AdamW steps of noisy gradients with a bias."""
    w0 = torch.randn(4096, generator=_gen(0)) * 0.02
    w = torch.nn.Parameter(w0.clone() if kind == "float32" else w0.to(torch.bfloat16))
    opt = (StochasticRoundingAdamW if kind == "stochastic" else torch.optim.AdamW)([w], lr=lr, weight_decay=0.1)
    g = _gen(1)
    for _ in range(steps):
        w.grad = (torch.randn(4096, generator=g) + 0.5).to(w.dtype)
        opt.step()
    return w.detach().float() - w0.to(w.dtype).float()


def test_small_steps_are_kept_on_average_not_lost():
    exact, nearest, stochastic = _drift("float32").mean(), _drift("nearest").mean(), _drift("stochastic").mean()
    assert exact < -3e-5  # the weights move about 0.45 lr per step against the gradient's bias
    assert abs(nearest / exact) < 0.05  # torch's AdamW on bf16: about 1 % of it (measured 0.012)
    assert stochastic / exact == pytest.approx(1.0, abs=0.1)  # measured 0.96


def test_same_seed_same_weights_and_a_resume_draws_what_the_run_drew():
    def fresh():
        torch.manual_seed(0)
        m = torch.nn.Linear(6, 4).to(torch.bfloat16)
        return m, StochasticRoundingAdamW(m.parameters(), seed=7, lr=1e-3)

    whole, opt = fresh()
    _steps(whole, opt, 6)
    first, opt1 = fresh()
    _steps(first, opt1, 3)
    saved = copy.deepcopy((first.state_dict(), opt1.state_dict()))
    resumed, opt2 = fresh()
    resumed.load_state_dict(saved[0])
    opt2.load_state_dict(saved[1])
    _steps(resumed, opt2, 3, seed=1)  # the data of steps 4-6 differ from the whole run's: compare stepwise below
    again, opt3 = fresh()
    _steps(again, opt3, 3)
    _steps(again, opt3, 3, seed=1)
    for p, q in zip(resumed.parameters(), again.parameters()):
        assert torch.equal(p, q)  # the rounding noise comes from the seed and the saved step count
    other, opt4 = fresh()
    opt4.seed = 8
    _steps(other, opt4, 6)
    assert any(not torch.equal(p, q) for p, q in zip(whole.parameters(), other.parameters()))


def test_configure_picks_stochastic_rounding_for_bf16_weights_only():
    settings = OptimSettings(lr=1e-6, min_lr=1e-6, warmup_steps=0, total_steps=10, weight_decay=0.1,
                             betas=(0.9, 0.95), seed=3)
    bf16, fp32 = _linear_pair(torch.bfloat16)[0], _linear_pair()[0]
    opt = configure_adamw(bf16, settings)["optimizer"]
    assert type(opt) is StochasticRoundingAdamW and opt.seed == 3
    assert type(configure_adamw(fp32, settings)["optimizer"]) is torch.optim.AdamW
    with pytest.warns(UserWarning, match=r"optim.lr=1e-06 with torch.bfloat16 weights: .* around \d+% of the matrix"):
        nearest = configure_adamw(bf16, OptimSettings(**{**settings.__dict__, "bf16_rounding": "nearest"}))
    assert type(nearest["optimizer"]) is torch.optim.AdamW


def test_no_warning_where_steps_are_kept():
    weights = [torch.randn(64, 64) * 0.02]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_lost_updates(weights, 1e-6)  # float32
        warn_lost_updates([w.to(torch.bfloat16) for w in weights], 1e-3)  # steps above the spacing
    with pytest.warns(UserWarning, match="torch.float16 weights"):
        warn_lost_updates([torch.full((8, 8), 1.0, dtype=torch.float16)], 1e-4)


def test_what_it_does_not_implement_is_refused():
    with pytest.raises(ValueError, match="does not implement amsgrad"):
        StochasticRoundingAdamW([torch.nn.Parameter(torch.zeros(2))], amsgrad=True)


def test_half_spacing_is_exact():
    from klear_lab.modules.optim import half_spacing

    w = torch.tensor([1.0, 1.99, 2.0, 0.02, -0.02], dtype=torch.bfloat16)
    # bf16 spacing in [1, 2) is 2^-7; in [2, 4) 2^-6; 0.02 lies in [2^-6, 2^-5): spacing 2^-13
    assert half_spacing(w).tolist() == [2**-8, 2**-8, 2**-7, 2**-14, 2**-14]
    nxt = torch.tensor([1.0 + 2**-8 * 1.01, 1.0 + 2**-8 * 0.99]).to(torch.bfloat16).tolist()
    assert nxt == [1.0 + 2**-7, 1.0]  # a step above half the spacing moves the weight, one below does not
    assert half_spacing(torch.tensor([1.0], dtype=torch.float16)).item() == 2**-11
    # subnormals share the smallest normal's gap: fp16 2^-24 apart, bf16 2^-133
    assert half_spacing(torch.tensor([2**-24, 2**-20], dtype=torch.float16)).tolist() == [2**-25, 2**-25]
    assert half_spacing(torch.tensor([2**-130], dtype=torch.bfloat16)).item() == 2**-134
