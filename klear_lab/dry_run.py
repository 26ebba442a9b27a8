"""``klear-lab train --dry-run``: build the model on the meta device and print the plan.

No weights are allocated and no data is read or downloaded, so a paper-scale config (Qwen3-8B,
32K context, 8 GPUs) is checked on a laptop. Data sizes come from the config: embedded sources
declare ``n_prompts``, file sources their ``limit``, mixes their ``budget``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from rich.markup import escape
from rich.table import Table

from klear_lab.builders import resolve_model_dir
from klear_lab.console import make_console
from klear_lab.distributed import device_count
from klear_lab.errors import ConfigError
from klear_lab.models.known_configs import KNOWN


def model_config(cfg: dict[str, Any]):
    """The model's HF config without weights: local dir, known paper checkpoint, or tiny builder."""
    from transformers import AutoConfig

    m = cfg["model"]
    if not m["name_or_path"]:
        from klear_lab.builders import build
        from klear_lab.registry import MODEL

        class _VocabOnly:  # the tiny tokenizer is trained at run time; only its size matters here
            def __len__(self) -> int:
                return m["tokenizer_vocab"]

            eos_token_id, pad_token_id = 0, 1

        return build(MODEL, m["tiny"]).config(_VocabOnly())
    path = resolve_model_dir(m["name_or_path"])
    if Path(path).is_dir():
        return AutoConfig.from_pretrained(path)
    if path in KNOWN:
        spec = dict(KNOWN[path])
        return AutoConfig.for_model(spec.pop("model_type"), **spec)
    raise ConfigError(f"model.name_or_path {path!r}: not a local directory and not a known architecture "
                      f"({', '.join(KNOWN)}); a dry run never downloads")


def meta_params(config) -> int:
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def estimated_examples(cfg: dict[str, Any]) -> int | None:
    mix = cfg["data"]["mix"]
    if mix.get("budget") and (mix["name"] != "top_k" or mix.get("k")):
        return int(mix["budget"])
    total = 0
    for src in cfg["data"]["sources"]:
        n = src.get("limit") or (src.get("n_prompts", 0) * src.get("responses_per_prompt", 1))
        if not n:
            return None
        total += n
    return total


def plan_rows(cfg: dict[str, Any], params: int) -> list[tuple[str, str]]:
    t, m = cfg["trainer"], cfg["model"]
    devices = device_count(t)
    rows = [("model", m["name_or_path"] or f"tiny {m['tiny']['name']} {m['tiny'].get('size', '')}"),
            ("parameters", f"{params / 1e6:,.1f} M")]
    if cfg["run"]["kind"] == "eval":
        return [*rows, ("weights (inference)", f"{params * 4 / 2**30:,.1f} GiB in fp32, one device"), eval_row(cfg)]
    rows += [("weights+grads+AdamW (fp32 master)", f"{params * 16 / 2**30:,.1f} GiB before sharding"),
             ("accelerator / devices / strategy / precision",
              f"{t['accelerator']} / {t['devices']} / {t['strategy']} / {t['precision']}")]
    if cfg["run"]["kind"] == "sft":
        s = cfg["sft"]
        max_len = cfg["data"]["max_length"]
        tokens_per_step = max(s["tokens_per_micro_batch"] // max_len, 1) * max_len * s["grad_accum"] * devices
        rows += [("max length", str(max_len)), ("tokens per optimizer step (packed)", f"{tokens_per_step:,}")]
        n = estimated_examples(cfg)
        if s["max_steps"] > 0:
            rows.append(("optimizer steps", f"{s['max_steps']:,}"))
        elif n:
            # assumption: packed examples average half the max length
            steps = int(s["epochs"] * n * max_len / 2 / tokens_per_step)
            rows += [("examples (declared)", f"{n:,}"), ("epochs", str(s["epochs"])),
                     ("optimizer steps (est., mean length = max/2)", f"{steps:,}")]
        o = cfg["optim"]
        rows.append(("lr schedule", f"warmup {o['warmup_steps']} -> {o['lr']:g} cosine -> {o['min_lr']:g}"))
    else:
        from klear_lab.stages.rl_plan import rl_plan_rows

        rows += rl_plan_rows(cfg, devices)
    return [*rows, eval_row(cfg)]


def eval_row(cfg: dict[str, Any]) -> tuple[str, str]:
    """How held-out problems are decoded: greedy or avg@k, by which engine."""
    ev = cfg["eval"]
    decoding = (f"avg@{ev['samples']}, temperature {ev['temperature']:g}, top_p {ev['top_p']:g}"
                if ev["temperature"] > 0 else "greedy")
    if ev.get("top_k"):
        decoding += f", top_k {ev['top_k']}"
    if ev.get("repetition_penalty", 1.0) != 1.0:
        decoding += f", repetition penalty {ev['repetition_penalty']:g}"
    engine = f"transformers generate, {ev['batch_size']} per batch"
    if ev["engine"] == "rollout" and cfg["rl"]["rollout"]["name"] != "hf":  # hf: the generate path
        engine = f"rollout engine {cfg['rl']['rollout']['name']!r}"
        if cfg["run"]["kind"] == "rl":  # the run's own engine, shared: its own row says if it is available
            engine += " (shared with the rollouts)"
        else:
            try:
                from klear_lab.builders import eval_engine

                eval_engine(cfg)
            except Exception as exc:  # noqa: BLE001 - reported, not fatal, in a plan
                engine += f" NOT AVAILABLE HERE: {exc}"
    return "evaluation", f"{decoding}; up to {ev['max_new_tokens']:,} new tokens; {engine}"


def dry_run(cfg: dict[str, Any]) -> list[tuple[str, str]]:
    params = meta_params(model_config(cfg))
    rows = plan_rows(cfg, params)
    table = Table(title=f"dry run: {cfg['run']['experiment'] or cfg['run']['name']} (meta device, nothing loaded)")
    table.add_column("item")
    table.add_column("value", justify="right")
    for k, v in rows:
        table.add_row(escape(k), escape(v))  # values quote errors like "pip install 'klear-lab[vllm]'"
    make_console().print(table)
    return rows
