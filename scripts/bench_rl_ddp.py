"""RL step time on one process versus DDP ranks on this machine (``trainer.devices`` 1 and N).

    .venv/bin/python scripts/bench_rl_ddp.py                      # quickstart GPPO, 20 steps, 1 vs 2
    .venv/bin/python scripts/bench_rl_ddp.py --steps 40 --devices 2 --seed 1 --out bench_runs/rl_ddp

Runs ``klear-lab train experiments/quickstart/rl.yaml`` (from the quickstart SFT model, trained
first into ``--out`` when it is not there yet) once per device count, one after another, each in
its own process with the same seed and ``--steps`` rollout steps of 16 prompts x 8, and prints per
run: training seconds, seconds per rollout step, generated tokens per second (summed over ranks),
the held-out accuracy, and the speed ratio against one process. On a CPU the ranks share the cores
(``trainer.accelerator=cpu``: each of N ranks gets cores / N torch threads), so the ratio shows the
cost or gain of splitting a step's generation and updates over processes, not of adding devices.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench_args import at_least, non_negative, positive
from bench_train import ROOT, train_summary


def run(devices: int, steps: int, out: Path, seed: int) -> dict:
    overrides = [f"run.seed={seed}", f"rl.steps={steps}", "rl.eval_every=0", "trainer.accelerator=cpu",
                 f"trainer.devices={devices}", *(["trainer.strategy=ddp"] if devices > 1 else [])]
    return train_summary("experiments/quickstart/rl.yaml", f"rl_ddp_bench_{devices}", overrides, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=positive, default=20)
    ap.add_argument("--seed", type=non_negative, default=0, help="run.seed of both RL runs (the SFT start is shared)")
    ap.add_argument("--devices", type=at_least(2), default=2, help="ranks of the DDP run (compared with 1), >= 2")
    ap.add_argument("--out", type=Path, default=ROOT / "bench_runs" / "rl_ddp")
    args = ap.parse_args()
    rows = []
    for devices in (1, args.devices):
        s = run(devices, args.steps, args.out, args.seed)
        per_step = s["perf/train_seconds"] / s["rl/rollout_steps"]
        rows.append((devices, s["perf/train_seconds"], per_step, s.get("perf/generated_tokens_per_s", float("nan")),
                     s.get("val/acc", float("nan")), s["perf/torch_threads"]))
    base = rows[0][2]
    print(f"{'devices':>7} {'threads':>7} {'train s':>8} {'s/step':>7} {'gen tok/s':>9} {'val/acc':>7} {'speed':>6}")
    for devices, train_s, per_step, tok_s, acc, threads in rows:
        print(f"{devices:>7} {threads:>7.0f} {train_s:>8.1f} {per_step:>7.2f} {tok_s:>9.0f} {acc:>7.3f} "
              f"{base / per_step:>5.2f}x")


if __name__ == "__main__":
    main()
