"""Cost per decode step of the ``hf`` engine's per-row seeded sampler against transformers' own.

    .venv/bin/python scripts/bench_sampling.py
    .venv/bin/python scripts/bench_sampling.py --rows 64 --vocab 300 49152 151936 --steps 50

The ``hf`` rollout engine draws each row's token itself (``SampleLogProbs._draw``: one uniform per
row from the row's own generator, inverse CDF over the vocabulary), so that a prompt's samples do
not depend on batching, and returns one-hot scores that transformers decodes greedily (argmax).
Before, transformers drew with ``torch.multinomial(softmax(scores))`` on the global RNG. For each
vocabulary size this times both on the same [rows, vocab] log-probs, in this process, and prints
milliseconds per step and the ratio. A model's forward pass per step comes on top of both.
"""

from __future__ import annotations

import argparse
import time

from bench_args import positive


def per_step(fn, steps: int) -> float:
    fn()  # warm-up
    start = time.perf_counter()
    for _ in range(steps):
        fn()
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=positive, default=64, help="sequences per generate call (rl.rollout.batch_size)")
    parser.add_argument("--vocab", type=positive, nargs="+", default=[300, 49152, 151936],
                        help="vocabulary sizes (tiny quickstart, SmolLM2, Qwen3)")
    parser.add_argument("--steps", type=positive, default=50)
    parser.add_argument("--threads", type=positive, default=None, help="torch threads (default: torch's own)")
    args = parser.parse_args()
    import torch

    from klear_lab.rl.hf_sampling import SampleLogProbs, one_hot_scores

    args.threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(args.threads)
    print(f"{args.rows} rows, {args.steps} steps, {args.threads} torch threads")
    print(f"{'vocab':>8} {'multinomial ms':>15} {'per-row draw + argmax ms':>25} {'ratio':>6}")
    for vocab in args.vocab:
        torch.manual_seed(0)
        logp = torch.log_softmax(torch.randn(args.rows, vocab) * 3, dim=-1)  # [rows, vocab]
        sampler = SampleLogProbs(temperature=1.0, top_p=1.0, seeds=list(range(args.rows)),
                                 max_new_tokens=args.steps + 1)  # a draw per call: warm-up + steps
        ref = per_step(lambda: torch.multinomial(torch.softmax(logp, dim=-1), 1), args.steps)  # noqa: B023
        ours = per_step(lambda: one_hot_scores(logp, sampler._draw(logp)).argmax(-1), args.steps)  # noqa: B023
        print(f"{vocab:>8} {ref * 1e3:>15.3f} {ours * 1e3:>25.3f} {ours / ref:>5.2f}x")


if __name__ == "__main__":
    main()
