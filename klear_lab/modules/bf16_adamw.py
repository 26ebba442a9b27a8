"""AdamW for bfloat16 weights with stochastic rounding, so that small updates are not lost.

Under ``trainer.precision=bf16-true`` the weights, gradients and AdamW states are bfloat16 (the one-GPU
paper RL budget has no room for float32 master weights). A bfloat16 number keeps 8 significant bits, so
an AdamW step below half the spacing around a weight (about ``|w| / 256``) rounds back to the weight
itself: at the paper's RL learning rate of 1e-6, nearly every step of a trained 8B model's weights
(|w| ~ 0.02, spacing ~1.2e-4) is lost, and so are AdamW's second-moment increments ((1 - beta2) g^2 is
1e-3 of the moment, under bfloat16's half spacing of 2e-3). Stochastic rounding rounds up or down with
the probabilities that make the stored value right on average (Zamirai et al. 2020, "Revisiting
BFloat16 Training", arXiv 2010.06192), at no memory cost: this optimizer computes each step in
float32, a slice of a tensor at a time, and stores the weight and both moments rounded that way.

The noise comes from a generator seeded by ``seed``, ``stream`` and the step count (kept in the
optimizer state), so a run is reproducible from its config and seed, a resumed run draws what the
uninterrupted run drew, and DDP ranks (same weights, same gradients, stream 0) stay identical; ranks
that hold different shards (FSDP) pass their rank as ``stream``, so their shards' noise is independent.
float32 parameters take exactly ``torch.optim.AdamW``'s step (``foreach=False``); float16 ones are
stepped in float32 and rounded to nearest. ``amsgrad``, ``fused`` and ``capturable`` are refused.
"""

from __future__ import annotations

import hashlib
import math

import torch

SLICE = 1 << 24  # elements per float32 slice: a 620M-element embedding makes a few 64 MiB temporaries


def stochastic_round_to_bf16(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """``x`` (float32) rounded to bfloat16 up or down, up with probability equal to the distance from the
    lower neighbour divided by the spacing: E[result] = x. Infinities and NaN stay what they are.

    bfloat16 is the top 16 bits of a float32: adding uniform noise to the low 16 bits, then cutting
    them, carries into the kept bits with exactly that probability (for either sign, as the bits are
    sign and magnitude)."""
    bits = x.contiguous().view(torch.int32)  # [...] the float32 bit patterns
    noise = torch.randint(0, 1 << 16, x.shape, dtype=torch.int32, device=x.device, generator=generator)
    cut = (bits + noise) & -65536  # 0xFFFF0000: keep sign, exponent and 7 mantissa bits
    special = ~torch.isfinite(x)  # inf + noise would read as NaN, a NaN's payload could become inf
    return torch.where(special, x, cut.view(torch.float32)).to(torch.bfloat16)  # exact: low bits are zero


class StochasticRoundingAdamW(torch.optim.AdamW):
    """``torch.optim.AdamW`` (same hyperparameters, state and checkpoints) whose bfloat16 parameters and
    moments are updated in float32 and stored with :func:`stochastic_round_to_bf16`."""

    def __init__(self, params, seed: int = 0, stream: int = 0, **kwargs) -> None:
        refused = [k for k in ("amsgrad", "fused", "capturable", "differentiable") if kwargs.get(k)]
        if refused:
            raise ValueError(f"StochasticRoundingAdamW does not implement {', '.join(refused)}")
        super().__init__(params, **kwargs)
        self.seed, self.stream = seed, stream

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        generators: dict[torch.device, torch.Generator] = {}
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:  # AdamW's own keys: a checkpoint loads into either optimizer
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                step = int(state["step"])
                if p.device not in generators:
                    generators[p.device] = torch.Generator(device=p.device)
                    generators[p.device].manual_seed(noise_seed(self.seed, self.stream, step))
                _adamw_update(p, p.grad, state["exp_avg"], state["exp_avg_sq"], step, group, generators[p.device])
        return loss


def noise_seed(seed: int, stream: int, step: int) -> int:
    """A 63-bit generator seed per (run seed, stream, step): nearby triples give unrelated streams."""
    digest = hashlib.blake2b(f"{seed}:{stream}:{step}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def _adamw_update(p: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
                  step: int, group: dict, generator: torch.Generator) -> None:
    """One AdamW step of ``p`` in float32, slice by slice, stored back in each tensor's own dtype."""
    beta1, beta2 = group["betas"]
    lr, eps, decay = group["lr"], group["eps"], group["weight_decay"]
    bias1, bias2_sqrt = 1 - beta1**step, math.sqrt(1 - beta2**step)
    if group.get("maximize"):
        grad = -grad
    kept = [t if t.is_contiguous() else t.contiguous() for t in (p, exp_avg, exp_avg_sq)]  # updated in place
    flat = [kept[0].view(-1), grad.reshape(-1), kept[1].view(-1), kept[2].view(-1)]  # [numel] each
    for w_, g_, m_, v_ in zip(*(t.split(SLICE) for t in flat)):
        w, g, m, v = (t.float() for t in (w_, g_, m_, v_))  # [slice] float32 copies (views if float32)
        w.mul_(1 - lr * decay)
        m.lerp_(g, 1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        w.addcdiv_(m, (v.sqrt() / bias2_sqrt).add_(eps), value=-lr / bias1)
        for stored, new in ((w_, w), (m_, m), (v_, v)):
            if stored.dtype == torch.bfloat16:
                stored.copy_(stochastic_round_to_bf16(new, generator))
            elif stored.data_ptr() != new.data_ptr():
                stored.copy_(new)
    for target, done in zip((p, exp_avg, exp_avg_sq), kept):
        if target is not done:  # a non-contiguous tensor was updated in a contiguous copy
            target.copy_(done)
