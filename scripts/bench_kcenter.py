"""Cost of ``select: kcenter`` (K-Center Greedy, paper Tables 2, 4 and 5) against ``select: random``.

    .venv/bin/python scripts/bench_kcenter.py
    .venv/bin/python scripts/bench_kcenter.py --pool 10000 100000 --picks 500 --words 120 --threads 2

For each pool size this builds a pool of synthetic prompts (``--words`` words drawn from a
10,000-word vocabulary), times the hashed prompt features (prompts/s) and K-Center Greedy's picks
(ms per pick; the cost grows with pool size × features, one pass per pick), projects the time of
the paper's 31,600 picks (an extrapolation where the pool is smaller), and times random selection of
the same count in this process for a ratio. A pool smaller than ``--picks`` gets pool-many picks (said so).
"""

from __future__ import annotations

import argparse
import random
import time

from bench_args import positive

PAPER_PICKS = 31600


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool", type=positive, nargs="+", default=[10000, 50000], help="records in a source")
    parser.add_argument("--picks", type=positive, default=500,
                        help="records chosen per timing (at most the pool's size)")
    parser.add_argument("--words", type=positive, default=80, help="words per prompt")
    parser.add_argument("--dim", type=positive, default=256, help="data.mix.kcenter_dim")
    parser.add_argument("--threads", type=positive, default=1)
    args = parser.parse_args()
    import torch

    from klear_lab.data.mixes.kcenter import kcenter_order, prompt_features

    torch.set_num_threads(args.threads)
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(10000)]
    print(f"threads {args.threads}, {args.words} words per prompt, {args.dim} features")
    for size in args.pool:
        prompts = [" ".join(rng.choices(vocab, k=args.words)) for _ in range(size)]
        start = time.perf_counter()
        features = prompt_features(prompts, args.dim)
        featurize = time.perf_counter() - start
        picks = min(args.picks, size)
        start = time.perf_counter()
        picked = len(kcenter_order(features, picks, first=0))  # fewer only where prompts repeat
        per_pick = (time.perf_counter() - start) / picked
        start = time.perf_counter()
        random.Random(0).sample(prompts, picked)
        drawn = time.perf_counter() - start
        print(f"pool {size:>7}: features {size / featurize:>9,.0f} prompts/s | kcenter {per_pick * 1e3:6.2f} ms/pick, "
              f"{projection(per_pick, size)} | {per_pick * picked / drawn:,.0f}x random's time"
              f"{picks_note(args.picks, picks, picked)}")


def picks_note(asked: int, capped: int, picked: int) -> str:
    """Empty when kcenter made the ``--picks`` asked for; else why it made fewer (timed per pick it made)."""
    notes = [f"{capped} picks: the pool's size, not --picks {asked}"] if capped < asked else []
    if picked < capped:
        notes.append(f"kcenter stopped at {picked}: the other prompts point the same way as picked ones")
    return f" ({'; '.join(notes)})" if notes else ""


def projection(per_pick: float, size: int) -> str:
    """The paper's 31,600 picks at this pool's cost per pick; marked where the pool could not supply them."""
    line = f"{PAPER_PICKS:,} picks ~{per_pick * PAPER_PICKS / 60:5.1f} min"
    return line if size >= PAPER_PICKS else f"{line} (extrapolated: more picks than the pool has)"


if __name__ == "__main__":
    main()
