"""GPPO: same forward as clip-higher, gradient (1 +- eps) * beta on clipped tokens (paper Eq. 11/12/17)."""

from __future__ import annotations

import math

import pytest
import torch
from clip_cases import close, run  # noqa: E402 - sibling helper module

from klear_lab.rl.clip.clip_higher import ClipHigherClip
from klear_lab.rl.clip.gppo import GPPOClip

# rows: A=+1 and A=-1, ratios 0.5 / 1.0 / 1.5 (eps_low 0.2, eps_high 0.28)
RATIOS, ADV = [[0.5, 1.0, 1.5], [0.5, 1.0, 1.5]], [1.0, -1.0]


def test_forward_equals_clip_higher_gradient_differs():
    gppo, g_grad = run(GPPOClip(), RATIOS, ADV)
    ch, c_grad = run(ClipHigherClip(), RATIOS, ADV)
    # values: A+: -0.5, -1, -1.28 (high clip); A-: 0.8 (low clip), 1, 1.5
    close(gppo.loss, [[-0.5, -1.0, -1.28], [0.8, 1.0, 1.5]])
    close(ch.loss, gppo.loss.tolist())
    # clip-higher: clipped tokens (r 1.5 A+, r 0.5 A-) get 0
    close(c_grad, [[-0.5, -1.0, 0.0], [0.0, 1.0, 1.5]])
    # GPPO: objective gradient F*A*grad logp with F = 1.28 (high) and 0.8 (low); loss = -objective
    close(g_grad, [[-0.5, -1.0, -1.28], [0.8, 1.0, 1.5]])
    for key in ("clipfrac_low", "clipfrac_high", "clipfrac"):
        close(gppo.metrics[key], ch.metrics[key].item())


def test_general_beta_changes_value_and_gradient():
    out, grad = run(GPPOClip(beta1=0.5, beta2=2.0), RATIOS, ADV)
    # high: -beta2*1.28*A = -2.56, grad -2.56; low: -beta1*0.8*A = 0.4, grad 0.4; others unchanged
    close(out.loss, [[-0.5, -1.0, -2.56], [0.4, 1.0, 1.5]])
    close(grad, [[-0.5, -1.0, -2.56], [0.4, 1.0, 1.5]])


def test_advantage_scales_clipped_gradient():
    _, grad = run(GPPOClip(beta1=0.25), [[1.5, 0.5]], [[3.0, -3.0]])
    # per-token adv: r 1.5, A +3 -> grad -1.28*3 = -3.84; r 0.5, A -3 -> 0.25*0.8*3 = 0.6
    close(grad, [[-3.84, 0.6]])


def test_only_high_hard_clips_low_side():
    out, grad = run(GPPOClip(only_high=True), RATIOS, ADV)
    # low side: constant (1-eps_low)*(-A) = 0.8, grad 0; high side keeps 1.28
    close(out.loss, [[-0.5, -1.0, -1.28], [0.8, 1.0, 1.5]])
    close(grad, [[-0.5, -1.0, -1.28], [0.0, 1.0, 1.5]])


def test_dual_clip_zero_gradient():
    out, grad = run(GPPOClip(dual_clip_c=10.0), [[12.0, 5.0, 12.0]], [[-1.0, -1.0, 1.0]])
    # A=-1, r 12 > c 10 -> loss 10, grad 0; A=-1, r 5 -> 5, grad 5; A=+1, r 12 -> -1.28, grad -1.28
    close(out.loss, [[10.0, 5.0, -1.28]])
    close(grad, [[0.0, 5.0, -1.28]])


def test_far_clipped_tokens_keep_their_gradient():
    """A token whose log-ratio is past the +-20 clamp of the ratio is still clipped with gradient F."""
    out, grad = run(GPPOClip(), [[math.exp(-19.0), math.exp(-21.0), math.exp(-25.0), math.exp(25.0)]],
                    [[-1.0, -1.0, -1.0, 1.0]])
    close(out.loss, [[0.8, 0.8, 0.8, -1.28]])
    close(grad, [[0.8, 0.8, 0.8, -1.28]])  # the clamp used to give 0 past e^-20 and e^20


def test_padding_is_zero():
    out, grad = run(GPPOClip(), [[1.5, 3.0]], [1.0], [[1, 0]])
    close(out.loss, [[-1.28, 0.0]])
    close(grad, [[-1.28, 0.0]])
    close(out.metrics["clipfrac_high"], 1.0)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"eps_low": 1.0}, "eps_low"),
        ({"eps_high": 0.0}, "eps_high"),
        ({"beta1": 0.0}, "beta1"),
        ({"beta2": -1.0}, "beta2"),
        ({"dual_clip_c": 1.0}, "dual_clip_c"),
        ({"only_high": True, "beta1": 0.5}, "beta1"),
    ],
)
def test_validation(kwargs, field):
    with pytest.raises(ValueError, match=field):
        GPPOClip(**kwargs)


def reference_masks(ratio, adv, eps_lo, eps_hi, beta_lo, beta_hi, c):
    """docs/paper.md Sec. 1.5 mask-based sketch of Eq. 17 plus the code's dual clip (per-token loss)."""
    unit = ratio / ratio.detach()
    low_hit, high_hit = (ratio < 1 - eps_lo) & (adv < 0), (ratio > 1 + eps_hi) & (adv > 0)
    surr = torch.where(
        low_hit, beta_lo * (1 - eps_lo) * unit, torch.where(high_hit, beta_hi * (1 + eps_hi) * unit, ratio)
    )
    return torch.where((adv < 0) & (ratio > c), -adv * c, -adv * surr)


def reference_clamp(ratio, adv, eps_lo, eps_hi, c):
    """Official-code style Eq. 11: clamp whose bounds are the tensors (1 -+ eps) r / sg(r), then dual clip."""
    unit = ratio / ratio.detach()
    bounded = torch.clamp(ratio, (1 - eps_lo) * unit, (1 + eps_hi) * unit)
    loss = torch.maximum(-adv * ratio, -adv * bounded)
    return torch.where(adv < 0, torch.minimum(loss, -adv * c), loss)


@pytest.mark.parametrize("betas", [(1.0, 1.0), (0.25, 1.0), (0.5, 2.0)])
def test_matches_reference_forms(betas):
    torch.manual_seed(0)
    old = -torch.rand(6, 8, dtype=torch.float64) * 3
    logp = (old + torch.randn(6, 8, dtype=torch.float64)).requires_grad_()
    adv = torch.randn(6, dtype=torch.float64)
    out = GPPOClip(beta1=betas[0], beta2=betas[1], dual_clip_c=3.0)(logp, old, adv, torch.ones(6, 8))
    (grad,) = torch.autograd.grad(out.loss.sum(), logp)
    ratio = torch.exp(logp - old)
    refs = [reference_masks(ratio, adv[:, None], 0.2, 0.28, *betas, 3.0)]
    if betas == (1.0, 1.0):
        refs.append(reference_clamp(ratio, adv[:, None], 0.2, 0.28, 3.0))
    for ref in refs:
        (ref_grad,) = torch.autograd.grad(ref.sum(), logp, retain_graph=True)
        torch.testing.assert_close(out.loss, ref.detach())
        torch.testing.assert_close(grad, ref_grad)
