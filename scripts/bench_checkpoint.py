"""What resumability costs: ``checkpoints/last.ckpt`` size and write time against the step time.

    .venv/bin/python scripts/bench_checkpoint.py                  # quickstart SFT and RL (tiny 2m model)
    .venv/bin/python scripts/bench_checkpoint.py --steps 20 --every 2

Trains the quickstart SFT and RL experiments for ``--steps`` steps with ``trainer.checkpoint_every``
= ``--every`` (RL from a fresh tiny model: the timing does not depend on what it learned), times every
checkpoint write (``klear_lab.checkpointing.save_beside``: Lightning's ``save_checkpoint`` to a
temporary file; then ``replace_durably``: its fsync and rename, at the next step) in the same process,
and prints the file size, the mean write time, the mean step time, and the write time as a share of
the ``trainer.checkpoint_every`` steps it covers at the default of 50. No checkpoint is written at a
run's final step, so ``--every`` must be below ``--steps``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from bench_args import at_least, positive

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_EVERY = 50


def timed_writes() -> list[float]:
    """Wrap ``save_beside`` and ``replace_durably`` so every write's seconds (both parts) are recorded."""
    from klear_lab import checkpointing

    seconds: list[float] = []
    save, rename = checkpointing.save_beside, checkpointing.replace_durably

    def timed_save(trainer, path):
        start = time.perf_counter()
        save(trainer, path)
        seconds.append(time.perf_counter() - start)

    def timed_rename(tmp, path):
        start = time.perf_counter()
        rename(tmp, path)
        seconds[-1] += time.perf_counter() - start

    checkpointing.save_beside, checkpointing.replace_durably = timed_save, timed_rename
    return seconds


def bench(name: str, experiment: str, overrides: list[str], steps_key: str) -> None:
    from klear_lab.config.compose import compose
    from klear_lab.run import run_experiment

    writes = timed_writes()
    with tempfile.TemporaryDirectory() as out:
        cfg = compose(ROOT / experiment, [f"run.out_dir={out}", "tracking.wandb.enabled=false", *overrides])
        result = run_experiment(cfg)
        checkpoint = result.run_dir / "checkpoints" / "last.ckpt"
        if not writes or not checkpoint.exists():
            sys.exit(f"{name}: no checkpoint was written (none is at a run's final step, nor at an epoch's last "
                     "batch): raise --steps or lower --every")
        size = checkpoint.stat().st_size
    steps = result.metrics[steps_key]
    step_s = result.metrics["perf/train_seconds"] / steps
    write_s = sum(writes) / len(writes)
    print(f"{name}: {len(writes)} checkpoints of {size / 2**20:.1f} MiB, {write_s * 1000:.0f} ms per write; "
          f"{step_s:.3f} s per step ({steps:.0f} steps, writes included); a write every {DEFAULT_EVERY} steps "
          f"costs {write_s / (DEFAULT_EVERY * step_s):.2%} of their time")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=at_least(2), default=20, help="steps of each run")
    parser.add_argument("--every", type=positive, default=4,
                        help="trainer.checkpoint_every, below --steps (none is written at the final step)")
    args = parser.parse_args()
    if args.every >= args.steps:
        parser.error(f"argument --every: must be < --steps ({args.steps}): no checkpoint is written at a run's "
                     f"final step, got {args.every}")
    every = f"trainer.checkpoint_every={args.every}"
    bench("SFT (quickstart)", "experiments/quickstart/sft.yaml",
          [f"sft.max_steps={args.steps}", "data.eval_sources.0.n_prompts=8", every], "train/steps")
    bench("RL (quickstart)", "experiments/quickstart/rl.yaml",
          ["model.init_from=null", f"rl.steps={args.steps}", "rl.eval_every=0", "data.eval_sources.0.n_prompts=8",
           "rl.group_filter=none", every], "rl/rollout_steps")


if __name__ == "__main__":
    main()
