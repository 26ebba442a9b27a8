"""Time and peak memory of the RL update's log-probs, whole responses against ``rl.logp_chunk_tokens``.

    .venv/bin/python scripts/bench_logp_chunks.py
    .venv/bin/python scripts/bench_logp_chunks.py --vocab 151936 --tokens 2048 --chunks 0 256 1024

One forward and backward of ``response_logp`` with entropies (what an update's micro-batch runs; at
``--entropy-coef 0`` the entropy is logged only, outside autograd, as ``rl.entropy_coef: 0`` runs) on
a small Qwen2 with a real vocabulary size. Each setting runs in a fresh process, so its peak resident
memory (``ru_maxrss``, CPU) or peak CUDA memory is its own; the first line is the whole-response
reference and the others are printed against it. It also prints the largest log-prob difference
from the reference, which should be float rounding.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

from bench_args import at_least, non_negative, positive

HEADS = 4  # the benchmark model's attention heads: --hidden gives each at least one dimension


def one_setting(args: argparse.Namespace, chunk: int) -> dict[str, float]:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from klear_lab.rl.steps import response_logp

    torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=2,
                                         intermediate_size=2 * args.hidden, num_attention_heads=4,
                                         num_key_value_heads=2, tie_word_embeddings=False)).to(device)
    gen = torch.Generator().manual_seed(1)
    prompts = torch.randint(1, args.vocab, (args.seqs, args.prompt), generator=gen).tolist()
    responses = torch.randint(1, args.vocab, (args.seqs, args.tokens), generator=gen)
    mask = torch.ones(args.seqs, args.tokens)
    times = []
    for _ in range(args.repeats + 1):  # the first is a warm-up
        model.zero_grad()
        start = time.perf_counter()
        logp, entropy = response_logp(model, prompts, responses, mask, pad_id=0, with_entropy=True,
                                      chunk_tokens=chunk, entropy_grad=args.entropy_coef != 0)
        (logp.sum() + args.entropy_coef * entropy.sum()).backward()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    peak = (torch.cuda.max_memory_allocated() / 2**20 if device == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return {"s": min(times[1:]), "peak_mib": peak, "logp": logp.detach().cpu().flatten()[:4096].tolist(),
            "device": device}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=at_least(2), default=49152, help="vocabulary (SmolLM2 49152; Qwen3 151936)")
    parser.add_argument("--tokens", type=positive, default=1024, help="response tokens per sequence")
    parser.add_argument("--prompt", type=positive, default=64, help="prompt tokens per sequence")
    parser.add_argument("--seqs", type=positive, default=2, help="sequences per micro-batch (rl.micro_batch_seqs)")
    parser.add_argument("--hidden", type=at_least(HEADS), default=128)
    parser.add_argument("--chunks", type=non_negative, nargs="+", default=[0, 512, 128], help="0 = whole responses")
    parser.add_argument("--repeats", type=positive, default=2)
    parser.add_argument("--entropy-coef", type=float, default=0.01,
                        help="0: the entropy is only logged, computed outside autograd (rl.entropy_coef 0)")
    parser.add_argument("--threads", type=positive, default=None, help="torch threads (default: torch's own)")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # a child's setting
    args = parser.parse_args()
    import torch

    args.threads = args.threads or torch.get_num_threads()
    if args.one is not None:
        print(json.dumps(one_setting(args, args.one)))
        return
    print(f"{args.seqs} sequences x ({args.prompt} prompt + {args.tokens} response) tokens, vocabulary "
          f"{args.vocab:,}, hidden {args.hidden}, {args.threads} threads; forward + backward, entropy coefficient "
          f"{args.entropy_coef:g}")
    reference = None
    for chunk in args.chunks:
        name = "whole responses" if chunk == 0 else f"chunks of {chunk}"
        out = measured_in_child(name, chunk)
        reference = reference or out
        diff = max(abs(a - b) for a, b in zip(out["logp"], reference["logp"]))
        print(f"{name:>18}: {out['s']:.3f} s ({out['s'] / reference['s']:.2f}x), peak {out['peak_mib']:,.0f} MiB "
              f"({out['peak_mib'] / reference['peak_mib']:.2f}x) on {out['device']}; max |logp diff| {diff:.1e}")


def measured_in_child(name: str, chunk: int) -> dict:
    """One setting's figures from a fresh process; exit with the tail of its stderr if it fails."""
    child = [sys.executable, __file__, *sys.argv[1:], "--one", str(chunk)]
    done = subprocess.run(child, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"the {name} setting failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


if __name__ == "__main__":
    main()
