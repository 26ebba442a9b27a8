"""RL clips its gradients itself (manual optimization): under ``16-mixed`` they are still loss-scaled then."""

from __future__ import annotations

import lightning as L
import torch
from lightning.pytorch.plugins.precision import MixedPrecision

from klear_lab.modules.optim import clip_scaled_grad_norm_, loss_scale


def _grads(scale: float) -> list[torch.nn.Parameter]:
    params = [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))]
    for p, g in zip(params, ([3.0, 0.0], [4.0]), strict=True):  # norm 5
        p.grad = torch.tensor(g) * scale
    return params


def test_scaled_gradients_are_clipped_as_their_unscaled_values_would_be():
    plain, scaled = _grads(1.0), _grads(65536.0)
    assert float(clip_scaled_grad_norm_(plain, 1.0)) == 5.0
    assert float(clip_scaled_grad_norm_(scaled, 1.0, 65536.0)) == 5.0  # the unscaled norm is logged
    for p, q in zip(plain, scaled, strict=True):  # unscaled (as the optimizer step does): the same clip
        torch.testing.assert_close(q.grad / 65536.0, p.grad)
    assert abs(float(torch.cat([p.grad for p in plain]).norm()) - 1.0) < 1e-6
    old = _grads(65536.0)  # clipped as they are: 1/65536 of the clip once unscaled
    torch.nn.utils.clip_grad_norm_(old, 1.0)
    assert float(torch.cat([p.grad for p in old]).norm()) / 65536.0 < 1e-4


def test_an_overflow_stays_non_finite_for_the_scaler_to_skip():
    params = _grads(65536.0)
    params[1].grad[0] = float("inf")
    assert clip_scaled_grad_norm_(params, 1.0, 65536.0).isinf()
    assert not torch.isfinite(torch.cat([p.grad for p in params])).all()


def test_loss_scale_is_the_scalers_under_16_mixed_only():
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    with_scaler = L.Trainer(accelerator="cpu", plugins=[MixedPrecision("16-mixed", "cpu", scaler=scaler)],
                            logger=False, enable_checkpointing=False, enable_progress_bar=False)
    assert loss_scale(with_scaler) == 1024.0
    for precision in ("32-true", "bf16-mixed", "16-mixed"):  # on a CPU, 16-mixed has no scaler
        trainer = L.Trainer(accelerator="cpu", precision=precision, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False)
        assert loss_scale(trainer) == 1.0
