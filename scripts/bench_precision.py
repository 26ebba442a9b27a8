"""SFT and RL speed per ``trainer.precision`` on one device, against ``32-true`` in the same script.

    .venv/bin/python scripts/bench_precision.py          # CPU: 32-true, bf16-mixed (bf16 is slow on most CPUs)
    python3 scripts/bench_precision.py --accelerator gpu --size 30m --sft-steps 200 --rl-steps 5 \\
        --precisions 32-true,16-mixed,bf16-mixed,bf16-true --set sft.tokens_per_micro_batch=12000

Each precision runs ``klear-lab train experiments/quickstart/sft.yaml`` for ``--sft-steps`` optimizer steps
and ``experiments/quickstart/rl.yaml`` from a fresh tiny model (no SFT start, no group filter, so every
step updates) for ``--rl-steps`` rollout steps, each in its own process with the same seed, and prints:
SFT tokens/s and final loss, RL seconds per step, generated tokens/s and the update's share of a step,
with the speed ratio against the first precision listed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench_args import comma_list, positive
from bench_train import ROOT
from bench_train import train_summary as train

# what Lightning's Trainer(precision=...) takes as a string (lightning.fabric.connector); checked here so a typo
# in the second precision is refused before the first one's runs, not minutes into the script
PRECISIONS = ("64-true", "32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed", "transformer-engine",
              "transformer-engine-float16", "64", "32", "16", "bf16")
SIZES = ("2m", "10m", "30m")  # model.tiny.size (klear_lab.models.builders.qwen2.SIZES)


def precision_list(text: str) -> list[str]:
    """An argparse ``type=``: comma-separated precisions Lightning knows."""
    precisions = comma_list(text)
    unknown = [p for p in precisions if p not in PRECISIONS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown precision {unknown[0]!r} (one of {', '.join(PRECISIONS)})")
    return precisions


def override(text: str) -> str:
    """An argparse ``type=``: a ``KEY=VALUE`` config override."""
    if "=" not in text or text.startswith("="):
        raise argparse.ArgumentTypeError(f"must be KEY=VALUE, got {text!r}")
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--accelerator", default="cpu", choices=("cpu", "gpu", "cuda", "mps", "auto"),
                    help="trainer.accelerator of every run (a name Lightning refuses failed only in the first run)")
    ap.add_argument("--precisions", type=precision_list, default="32-true,bf16-mixed",
                    help="comma-separated; the first is the reference")
    ap.add_argument("--size", default="2m", choices=SIZES, help="model.tiny.size of both runs")
    ap.add_argument("--sft-steps", type=positive, default=40)
    ap.add_argument("--rl-steps", type=positive, default=2)
    ap.add_argument("--set", type=override, nargs="*", default=[], metavar="KEY=VALUE",
                    help="more overrides for the SFT runs")
    ap.add_argument("--out", type=Path, default=ROOT / "bench_runs" / "precision")
    args = ap.parse_args()
    common = [f"trainer.accelerator={args.accelerator}", "trainer.devices=1", f"model.tiny.size={args.size}"]
    if args.size != "2m":  # the quickstart SFT's 12 heads are the 2m width's; other sizes take their presets'
        common += ["model.tiny.num_heads=0", "model.tiny.num_kv_heads=0"]
    rows = []
    for precision in args.precisions:
        tag = precision.replace("-", "_")
        sft = train("experiments/quickstart/sft.yaml", f"sft_{tag}",
                    [*common, f"trainer.precision={precision}", f"sft.max_steps={args.sft_steps}",
                     "data.eval_sources.0.n_prompts=16", "eval.max_new_tokens=24", *args.set], args.out)
        rl = train("experiments/quickstart/rl.yaml", f"rl_{tag}",
                   [*common, f"trainer.precision={precision}", "model.init_from=null", "rl.group_filter=none",
                    f"rl.steps={args.rl_steps}", "rl.eval_every=0", "data.eval_sources.0.n_prompts=16",
                    "eval.max_new_tokens=24"], args.out)
        rows.append((precision, sft["perf/tokens_per_s"], sft["train/loss"], rl["perf/step_s"],
                     rl.get("perf/generated_tokens_per_s", float("nan")),
                     rl.get("perf/time_update_s", float("nan")) / rl["perf/step_s"]))
    print(f"accelerator {args.accelerator}, tiny model {args.size}, {args.sft_steps} SFT steps, "
          f"{args.rl_steps} RL steps")
    print(f"{'precision':>10} {'SFT tok/s':>10} {'speed':>6} {'SFT loss':>8} {'RL s/step':>9} {'speed':>6} "
          f"{'gen tok/s':>9} {'update':>6}")
    sft0, rl0 = rows[0][1], rows[0][3]
    for precision, tok_s, loss, step_s, gen, update in rows:
        print(f"{precision:>10} {tok_s:>10.0f} {tok_s / sft0:>5.2f}x {loss:>8.4f} {step_s:>9.2f} {rl0 / step_s:>5.2f}x "
              f"{gen:>9.0f} {update:>6.0%}")


if __name__ == "__main__":
    main()
