"""Cost of ``select: kcenter`` (K-Center Greedy, paper Tables 2, 4 and 5) against ``select: random``.

    .venv/bin/python scripts/bench_kcenter.py
    .venv/bin/python scripts/bench_kcenter.py --pool 10000 100000 --picks 500 --words 120 --threads 2

For each pool size this builds a pool of synthetic prompts (``--words`` words drawn from a
10,000-word vocabulary), times the hashed prompt features (prompts/s) and K-Center Greedy's picks
(ms per pick; the cost grows with pool size × features, one pass per pick), projects the time of
the paper's 31,600 picks, and times random selection of the same count in this process for a ratio.
"""

from __future__ import annotations

import argparse
import random
import time

import torch

from klear_lab.data.mixes.kcenter import kcenter_order, prompt_features


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool", type=int, nargs="+", default=[10000, 50000], help="records in a source")
    parser.add_argument("--picks", type=int, default=500, help="records chosen per timing")
    parser.add_argument("--words", type=int, default=80, help="words per prompt")
    parser.add_argument("--dim", type=int, default=256, help="data.mix.kcenter_dim")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(10000)]
    print(f"threads {args.threads}, {args.words} words per prompt, {args.dim} features")
    for size in args.pool:
        prompts = [" ".join(rng.choices(vocab, k=args.words)) for _ in range(size)]
        start = time.perf_counter()
        features = prompt_features(prompts, args.dim)
        featurize = time.perf_counter() - start
        start = time.perf_counter()
        kcenter_order(features, args.picks, first=0)
        per_pick = (time.perf_counter() - start) / args.picks
        start = time.perf_counter()
        random.Random(0).sample(prompts, args.picks)
        drawn = time.perf_counter() - start
        print(f"pool {size:>7}: features {size / featurize:>9,.0f} prompts/s | kcenter {per_pick * 1e3:6.2f} ms/pick, "
              f"31,600 picks ~{per_pick * 31600 / 60:5.1f} min | {per_pick * args.picks / drawn:,.0f}x random's time")


if __name__ == "__main__":
    main()
