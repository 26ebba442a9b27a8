"""What only a CUDA device shows: the clip variants' math, stochastic rounding's CUDA generator, fp16's
loss scaler in SFT and RL, and a resumed RL run, on the GPU.

Not in the default set (marker ``gpu``): ``pytest -m gpu tests/gpu`` on a machine with CUDA. Each run is
the quickstart's tiny model for a few steps; the checks compare against the CPU or float32 result.
"""

from __future__ import annotations

import copy
import csv
import math
from pathlib import Path

import lightning as L
import pytest
import torch
from safetensors.torch import load_file

from klear_lab.config.compose import compose
from klear_lab.modules.bf16_adamw import StochasticRoundingAdamW
from klear_lab.registry import CLIP
from klear_lab.resume import resume_config
from klear_lab.run import run_experiment

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

ROOT = Path(__file__).resolve().parents[2]
SFT, RL = str(ROOT / "experiments/quickstart/sft.yaml"), str(ROOT / "experiments/quickstart/rl.yaml")
GPU = ["trainer.accelerator=gpu", "trainer.devices=1", "tracking.wandb.enabled=false", "trainer.log_every_n_steps=1"]
TINY_SFT = ["data.sources.0.n_prompts=400", "sft.max_steps=8", "data.eval_sources.0.n_prompts=16",
            "eval.max_new_tokens=24", "trainer.checkpoint=false", "sft.tokens_per_micro_batch=1200"]
TINY_RL = ["model.init_from=null", "model.tiny.size=2m", "rl.prompts_per_step=4", "rl.group_size=4",
           "rl.minibatch_prompts=2", "rl.max_new_tokens=16", "rl.group_filter=none", "data.sources.0.n_prompts=40",
           "data.eval_sources.0.n_prompts=8", "eval.max_new_tokens=8"]


def rows(run_dir: Path, key: str) -> list[tuple[int, float]]:
    with (run_dir / "csv" / "metrics.csv").open(newline="") as f:
        return [(int(r["step"]), float(r[key])) for r in csv.DictReader(f) if r.get(key)]


@pytest.mark.parametrize("name", sorted(CLIP.names()))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_clip_variant_gives_its_cpu_values_and_gradients_on_cuda(name, dtype):
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(6, 10, generator=g) * 3  # [B, T] log-probs
    logp = old + torch.randn(6, 10, generator=g) * 0.4  # ratios around 1, many clipped both ways
    adv, mask = torch.randn(6, generator=g), (torch.rand(6, 10, generator=g) > 0.2).float()
    clip = CLIP.build({"name": name})
    results = []
    for device in ("cpu", "cuda"):
        x = logp.to(device, dtype).requires_grad_()
        out = clip(x, old.to(device, dtype), adv.to(device, dtype), mask.to(device, dtype))
        (out.loss * mask.to(device, dtype)).sum().backward()
        results.append((out.loss.float().cpu(), x.grad.float().cpu()))
    tol = {"atol": 1e-5, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    torch.testing.assert_close(results[1][0], results[0][0], **tol)
    torch.testing.assert_close(results[1][1], results[0][1], **tol)


def _drift(kind: str, device: str, seed: int = 7) -> torch.Tensor:
    """The mean update of 65,536 weights (std 0.02) after 100 AdamW steps at lr 1e-6 of biased noisy gradients."""
    g = torch.Generator(device=device).manual_seed(0)
    w0 = torch.randn(65536, generator=g, device=device) * 0.02
    w = torch.nn.Parameter(w0.clone() if kind == "float32" else w0.to(torch.bfloat16))
    opt = (StochasticRoundingAdamW([w], lr=1e-6, weight_decay=0.1, seed=seed) if kind == "stochastic"
           else torch.optim.AdamW([w], lr=1e-6, weight_decay=0.1))
    for _ in range(100):
        w.grad = (torch.randn(65536, generator=g, device=device) + 0.5).to(w.dtype)
        opt.step()
    return w.detach().float() - w0.to(w.dtype).float()


def test_stochastic_rounding_on_cuda_keeps_small_steps_and_repeats_with_its_seed():
    exact, nearest, stochastic = (_drift(k, "cuda").mean().item() for k in ("float32", "nearest", "stochastic"))
    assert exact < -3e-5
    assert abs(nearest / exact) < 0.05  # bf16 rounded to nearest loses the steps
    assert stochastic / exact == pytest.approx(1.0, abs=0.1)  # CPU measured 0.96
    assert torch.equal(_drift("stochastic", "cuda"), _drift("stochastic", "cuda"))
    assert not torch.equal(_drift("stochastic", "cuda"), _drift("stochastic", "cuda", seed=8))


@pytest.fixture(scope="module")
def sft_runs(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("sft")
    runs = {}
    for precision in ("32-true", "16-mixed", "bf16-mixed", "bf16-true"):
        result = run_experiment(compose(SFT, [*GPU, *TINY_SFT, f"trainer.precision={precision}",
                                              f"run.out_dir={out / precision}"]))
        runs[precision] = result.run_dir
    return runs


def test_sft_trains_on_cuda_in_every_precision_with_unscaled_gradient_norms(sft_runs):
    reference = rows(sft_runs["32-true"], "train/grad_norm")
    assert len(reference) == 8
    for precision, run_dir in sft_runs.items():
        loss, norms = rows(run_dir, "train/loss"), rows(run_dir, "train/grad_norm")
        assert all(math.isfinite(v) for _, v in loss) and loss[-1][1] < loss[0][1], (precision, loss)
        ratio = norms[0][1] / reference[0][1]  # the same weights and batch at the first step
        assert ratio == pytest.approx(1.0, abs=0.05 if precision != "bf16-true" else 0.15), (precision, ratio)


def test_rl_on_cuda_clips_unscaled_gradients_under_16_mixed(tmp_path):
    """RL clips its gradients itself (manual optimization); under 16-mixed they were still multiplied by
    the loss scale (65536) then: every update was cut to 1/65536 of the clip, and rl/grad_norm was 65536x."""
    norms = {}
    for precision in ("32-true", "16-mixed", "bf16-mixed"):
        result = run_experiment(compose(RL, [*GPU, *TINY_RL, "rl.steps=3", "rl.eval_every=0",
                                             f"trainer.precision={precision}", f"run.out_dir={tmp_path / precision}"]))
        norms[precision] = [v for _, v in rows(result.run_dir, "rl/grad_norm")]
        assert len(norms[precision]) == 3 and all(math.isfinite(v) for v in norms[precision]), norms
    for precision in ("16-mixed", "bf16-mixed"):
        ratio = norms[precision][0] / norms["32-true"][0]  # the first step samples from the same weights
        assert 0.5 < ratio < 2.0, (precision, norms)


class Crash(L.Callback):
    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.fit_loop.epoch_loop.batch_progress.total.processed == 3:
            raise RuntimeError("simulated crash")


def test_a_resumed_rl_run_on_cuda_continues_like_an_uninterrupted_one(tmp_path):
    """The CUDA RNG state travels in the checkpoint with the CPU one."""
    overrides = [*GPU, *TINY_RL, "rl.steps=6", "rl.eval_every=2", "rl.kl_coef=0.01", "trainer.checkpoint_every=2"]
    whole = run_experiment(compose(RL, [*overrides, f"run.out_dir={tmp_path / 'whole'}"]))
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_experiment(compose(RL, [*overrides, f"run.out_dir={tmp_path / 'stopped'}"]), callbacks=[Crash()])
    (run_dir,) = (tmp_path / "stopped").iterdir()
    run_experiment(resume_config(run_dir), resume=run_dir)
    for key in ("reward/mean", "rl/response_len_mean", "val/acc", "rl/grad_norm"):
        got, want = rows(run_dir, key), rows(whole.run_dir, key)
        assert [s for s, _ in got] == [s for s, _ in want], key
        torch.testing.assert_close(torch.tensor([v for _, v in got]), torch.tensor([v for _, v in want]),
                                   rtol=1e-4, atol=1e-6, msg=key)
    a, b = load_file(whole.run_dir / "model" / "model.safetensors"), load_file(run_dir / "model" / "model.safetensors")
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=0, atol=1e-5, msg=key)


def test_a_cuda_generator_state_round_trips():
    """What the checkpoint stores for CUDA (``torch.cuda.get_rng_state_all``) restores the same draws."""
    torch.cuda.manual_seed_all(3)
    state = copy.deepcopy(torch.cuda.get_rng_state_all())
    first = torch.rand(5, device="cuda")
    torch.cuda.set_rng_state_all(state)
    assert torch.equal(torch.rand(5, device="cuda"), first)
