"""Starting the vllm engine: process-wide settings vLLM reads, ``vllm.LLM``'s arguments, the context it settled on."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from klear_lab.rl.rollout.vllm import VLLMRollout

CPU_DEFAULT_KV_GIB = 1.0


def resolve_dtype(dtype: str, model: torch.nn.Module) -> str:
    """``auto`` -> the policy's parameter dtype name (e.g. ``float32``)."""
    if dtype != "auto":
        return dtype
    return str(next(model.parameters()).dtype).removeprefix("torch.")


def engine_max_len(llm) -> int | None:
    """The context vLLM settled on (``max_model_len``, or what it derived from the model config)."""
    value = getattr(getattr(getattr(llm, "llm_engine", None), "model_config", None), "max_model_len", None)
    return int(value) if value else None


def prepare_env(config: VLLMRollout, dtype: str) -> bool:
    """Process-wide settings vLLM reads at engine creation; returns True if the engine is in process."""
    if config.tensor_parallel_size == 1:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if not torch.cuda.is_available() and dtype == "bfloat16" and hasattr(torch.cpu, "_init_amx"):
        torch.cpu._init_amx()  # bf16 decode of a single sequence can crash without it (environment.md)
    return config.tensor_parallel_size == 1 and os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"


def make_llm(config: VLLMRollout, path: str, dtype: str):
    """``vllm.LLM`` on the policy saved at ``path``, with ``config``'s settings."""
    from vllm import LLM

    kwargs: dict = {
        "model": path, "tokenizer": path, "dtype": dtype, "enforce_eager": config.enforce_eager,
        "seed": config.seed, "tensor_parallel_size": config.tensor_parallel_size,
        "max_num_seqs": config.max_num_seqs, "enable_prefix_caching": config.enable_prefix_caching,
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "logprobs_mode": "processed_logprobs",  # after temperature / top-p: what was sampled from
        "generation_config": "vllm",  # ignore generation_config.json defaults (hub temperature etc.)
    }
    if config.tensor_parallel_size == 1:
        kwargs["distributed_executor_backend"] = "uni"
    if config.max_model_len:
        kwargs["max_model_len"] = config.max_model_len
    gib = config.kv_cache_gib or (0.0 if torch.cuda.is_available() else CPU_DEFAULT_KV_GIB)
    if gib:
        kwargs["kv_cache_memory_bytes"] = int(gib * 2**30)
    return LLM(**kwargs)
