"""``klear-lab train --dry-run``: build the model on the meta device and print the plan.

No weights are allocated and no data file is read or downloaded, so a paper-scale config (Qwen3-8B,
32K context, 8 GPUs) is checked on a laptop; an RL run's ``rl.reward`` is checked against the tasks its
sources declare (a generated world that declares none is generated). Data sizes come from the config
(``dry_run_data``, which bounds the SFT steps by them): embedded sources declare ``n_prompts``, file sources
their ``limit``, mixes their ``budget``; a row says the data rows are not read or checked (what the config
decides without them is: the data mix against the sources' labels and ranks, the held-out sources' names;
``dry_run_data.data_rows``). A row that
says NOT SUPPORTED is a config problem (the run would stop with a ConfigError: an ``rl.reward`` of another
task than the training sources, say): the command exits 2 after the plan; NOT AVAILABLE HERE (a package,
device, data file or sandbox this machine lacks: a ``code`` reward the run would call without bubblewrap)
leaves it at 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from rich.markup import escape
from rich.table import Table

from klear_lab.build_model import check_model_dir, resolve_model_dir
from klear_lab.console import make_console
from klear_lab.distributed import device_count
from klear_lab.dry_run_data import data_rows, estimated_examples, heldout_row, sft_steps_rows, sft_warmup_problem
from klear_lab.dry_run_twins import earlier_run_rows
from klear_lab.errors import ComponentError, ConfigError
from klear_lab.models.known_configs import KNOWN
from klear_lab.rl.probes import probe_rl_components
from klear_lab.stages.rl_plan import lr_schedule_text
from klear_lab.stages.sft_steps import many_epochs_rows, rows_per_micro_batch

UNSUPPORTED = "NOT SUPPORTED"  # a row that says the config cannot run: the command exits 2 after the plan
NOT_HERE = "NOT AVAILABLE HERE"  # a row that says this machine lacks something (a package, a GPU, a file)
# Lightning converts the model to these precisions' dtype (HalfPrecision, DoublePrecision); 32-true and
# the *-mixed ones leave it as loaded
TRUE_PRECISIONS = {"bf16-true": torch.bfloat16, "16-true": torch.float16, "64-true": torch.float64,
                   "64": torch.float64}
DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.float64: "fp64"}


def model_config(cfg: dict[str, Any]):
    """The model's HF config without weights: local dir, known paper checkpoint, tiny builder, or the
    ``model.init_from`` experiment's (the run trains that model further, not this config's ``tiny``)."""
    from transformers import AutoConfig

    m = cfg["model"]
    if not m["name_or_path"] and m["init_from"]:
        from klear_lab.starting_point import parent_config

        return model_config(parent_config(cfg))
    if not m["name_or_path"]:
        from klear_lab.builders import build
        from klear_lab.registry import MODEL

        class _VocabOnly:  # the tiny tokenizer is trained at run time; only its size matters here
            def __len__(self) -> int:
                return m["tokenizer_vocab"]

            eos_token_id, pad_token_id = 0, 1

        return build(MODEL, m["tiny"]).config(_VocabOnly())
    path = resolve_model_dir(m["name_or_path"])
    check_model_dir(m["name_or_path"], path)
    if Path(path).is_dir():
        return AutoConfig.from_pretrained(path)
    if path in KNOWN:
        spec = dict(KNOWN[path])
        return AutoConfig.for_model(spec.pop("model_type"), **spec)
    raise ConfigError(f"model.name_or_path {path!r}: not a local directory and not a known architecture "
                      f"({', '.join(KNOWN)}); a dry run never downloads")


def model_name(cfg: dict[str, Any]) -> str:
    """The model as the plan names it; through ``model.init_from``, the starting experiment's, after it."""
    m = cfg["model"]
    if not m["name_or_path"] and m["init_from"]:
        from klear_lab.starting_point import parent_config

        parent = parent_config(cfg)
        return f"{model_name(parent)}, as {parent['run']['experiment']} leaves it (model.init_from)"
    return m["name_or_path"] or f"tiny {m['tiny']['name']} {m['tiny'].get('size', '')}"


def meta_params(config) -> int:
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def plan_rows(cfg: dict[str, Any], params: int) -> list[tuple[str, str]]:
    t = cfg["trainer"]
    devices = device_count(t)
    from klear_lab.build_model import unavailable_model
    from klear_lab.builders import unavailable_data
    from klear_lab.reward_checks import (
        parent_unavailable_rewards,
        reward_task_problem,
        unavailable_rewards,
        unread_reward_sources,
    )

    missing = cfg["model"]["name_or_path"] and unavailable_model(cfg["model"]["name_or_path"])
    mismatch = reward_task_problem(cfg, read=False)  # the run's refusal at its start: no file is read to know
    rows = [("model", model_name(cfg) + (f" ({NOT_HERE}: {missing})" if missing else "")),
            ("parameters", f"{params / 1e6:,.1f} M"),
            *((key, f"{NOT_HERE}: {why}") for key, why in unavailable_data(cfg)),
            *((key, f"{NOT_HERE}: {why}") for key, why in unavailable_rewards(cfg, read=False)),
            *((key, f"{NOT_HERE}: {why}") for key, why in parent_unavailable_rewards(cfg, read=False)),
            *([("rl.reward tasks", f"{UNSUPPORTED}: {mismatch}")] if mismatch else []),
            *([("rl.reward tasks", f"not checked for {', '.join(unread)}: task auto, and the dry run reads no data "
                "(`sweep --validate-only` reads it, the run checks its records at its start; `task: math` or "
                "`task: code` on the source lets the dry run check)")] if not mismatch
              and (unread := unread_reward_sources(cfg)) else [])]
    if cfg["run"]["kind"] == "eval":
        dtype, source = weight_dtype(cfg, training=False)
        weights = f"{size(params * dtype.itemsize)} in {DTYPE_NAMES[dtype]} ({source}), one device"
        return [*rows, ("weights (inference)", weights), ("accelerator", f"{t['accelerator']}{gpu_note(t, False)}"),
                heldout_row(cfg), eval_row(cfg), *data_rows(cfg)]
    rows += [*init_from_rows(cfg), training_memory_row(cfg, params),
             ("accelerator / devices / strategy / precision",
              f"{t['accelerator']} / {t['devices']} / {t['strategy']} / {t['precision']}{gpu_note(t, True)}")]
    if cfg["run"]["kind"] == "sft":
        s = cfg["sft"]
        max_len = cfg["data"]["max_length"]
        tokens_per_step = rows_per_micro_batch(cfg) * max_len * s["grad_accum"] * devices
        d = cfg["data"]
        rows += [("data mix / filter", f"{d['mix']['name']} / {d['filter']['name']}"), ("max length", str(max_len)),
                 ("tokens per optimizer step (packed)", f"{tokens_per_step:,}"), *sft_steps_rows(cfg),
                 *many_epochs_rows(cfg, estimated_examples(cfg)), ("lr schedule", lr_schedule_text(cfg["optim"]))]
        scheduled = s["max_steps"]  # 0 (by epochs): sft_warmup_problem warns from the most steps it can be
    else:
        from klear_lab.stages.rl_plan import rl_plan_rows, schedule_steps

        rows += rl_plan_rows(cfg, devices)
        scheduled = schedule_steps(cfg["rl"])
    from klear_lab.builders import warmup_problem

    warning = warmup_problem(cfg["optim"], scheduled) or (cfg["run"]["kind"] == "sft" and sft_warmup_problem(cfg))
    return [*rows, *([("warning", warning)] if warning else []), heldout_row(cfg), eval_row(cfg), *data_rows(cfg)]


def gpu_note(trainer: dict[str, Any], training: bool) -> str:
    """`` (NOT AVAILABLE HERE: ...)`` where ``trainer.accelerator`` names a GPU (``gpu``/``cuda``) and this machine
    shows none, else "". The run stops there (Lightning: "No supported gpu backend found!"; eval: a ConfigError),
    but the config may be meant for a GPU machine, so not NOT SUPPORTED. ``auto`` falls back to the CPU; Lightning
    trains ``gpu`` on Apple's MPS too, which an eval run does not use."""
    accelerator = str(trainer["accelerator"])
    if accelerator not in ("gpu", "cuda") or torch.cuda.is_available():
        return ""
    if training and accelerator == "gpu" and torch.backends.mps.is_available():
        return ""
    return f" ({NOT_HERE}: no CUDA device is visible here: the run would stop)"


def weight_dtype(cfg: dict[str, Any], training: bool) -> tuple[torch.dtype, str]:
    """The dtype the weights are held in (in training their gradients and AdamW states too), and the key
    that sets it.

    The model is loaded in ``model.dtype``. A ``16-true``, ``bf16-true`` or ``64-true`` precision makes
    Lightning convert it for training, so the optimizer states follow; ``32-true`` and the ``*-mixed``
    precisions leave it as loaded (autocast lowers the compute, not the stored weights).
    """
    precision = str(cfg["trainer"]["precision"])
    if training and precision in TRUE_PRECISIONS:
        return TRUE_PRECISIONS[precision], f"trainer.precision={precision}"
    return getattr(torch, cfg["model"]["dtype"]), f"model.dtype={cfg['model']['dtype']}"


def training_memory_row(cfg: dict[str, Any], params: int) -> tuple[str, str]:
    """Weights, gradients and AdamW's two moments: four tensors per parameter in the weights' dtype
    (no separate fp32 master copy: under ``*-mixed`` the weights themselves are the master)."""
    dtype, source = weight_dtype(cfg, training=True)
    precision = str(cfg["trainer"]["precision"])
    held = f"{DTYPE_NAMES[dtype]} ({source}"
    if precision.endswith("mixed") or precision in ("16", "bf16"):
        held += f"; {precision} computes under autocast"
    if dtype == torch.bfloat16:  # modules/bf16_adamw.py: a step below a weight's bf16 spacing is lost to nearest
        held += ("; AdamW rounds stochastically" if cfg["optim"]["bf16_rounding"] == "stochastic"
                 else "; AdamW rounds to nearest: a step under half a weight's bf16 spacing is lost")
    return "weights+grads+AdamW", f"{size(params * 4 * dtype.itemsize)} in {held}), before sharding"


def init_from_rows(cfg: dict[str, Any]) -> list[tuple[str, str]]:
    """Where the ``model.init_from`` starting point comes from, as the run will find it
    (``starting_point.resolve_init_from``): its completed run, else its stopped run resumed, else a whole
    training run of that experiment first. Only looked up: a dry run trains nothing."""
    m = cfg["model"]
    if m["name_or_path"] and m["init_from"]:
        from klear_lab.starting_point import warn_init_from_unused

        warn_init_from_unused(cfg)  # as the run will
    if m["name_or_path"] or not m["init_from"]:
        return []
    from klear_lab.distributed import several_devices
    from klear_lab.starting_point import completed_parent, find_resumable_run, parent_config
    from klear_lab.tracking import config_hash, out_dir_of

    parent = parent_config(cfg)
    out, seed, parent_hash = out_dir_of(parent), parent["run"]["seed"], config_hash(parent)
    name, key = parent["run"]["experiment"], "starting point (model.init_from)"
    done, stale = completed_parent(parent, parent_hash)
    if done is not None:
        return [(key, f"{name}: its completed run {done}" + (f" ({stale})" if stale else ""))]
    from klear_lab.start_sharing import sweep_start

    if (swept := sweep_start(parent, parent_hash)) is not None:
        return [(key, f"{name}: the completed run {swept} a sweep trained (hard-linked into {out}/ at the start)"
                      + (f" ({stale})" if stale else ""))]
    missing = (f"{name}: {stale}" if stale else
               f"{name}: no completed run of it (this config, seed {seed}) in {out}/")
    stopped = find_resumable_run(out, parent_hash, seed=seed)
    if several_devices(parent["trainer"]):  # resolve_init_from refuses to train or resume it from here
        how = f"klear-lab resume {stopped}" if stopped else f"klear-lab train {name} run.out_dir={out}"
        return [(key, f"{UNSUPPORTED}: {missing}, and it trains on several devices: "
                      f"{'finish' if stopped else 'train'} it first with `{how}`")]
    if stopped is not None:
        return [(key, f"{missing}: the run first RESUMES its stopped run {stopped}")]
    return [(key, f"{missing}: the run first TRAINS IT, a whole {parent['run']['kind']} run "
                  f"(its plan: klear-lab train {name} --dry-run)")]


def size(n_bytes: float) -> str:
    """GiB, or MiB below one (a tiny model's 30 MB read "0.0 GiB")."""
    return f"{n_bytes / 2**30:,.1f} GiB" if n_bytes >= 2**30 else f"{n_bytes / 2**20:,.1f} MiB"


def unsupported(rows: list[tuple[str, str]]) -> list[str]:
    """The rows that say the config cannot run (a config problem), as ``item: value``; rows that only
    say something is not available on this machine (a package, a GPU) are not among them."""
    return [f"{k}: {v}" for k, v in rows if UNSUPPORTED in v]


def eval_row(cfg: dict[str, Any]) -> tuple[str, str]:
    """How held-out problems are decoded: greedy or avg@k, by which engine."""
    ev = cfg["eval"]
    decoding = (f"avg@{ev['samples']}, temperature {ev['temperature']:g}, top_p {ev['top_p']:g}"
                if ev["temperature"] > 0 else "greedy")
    if ev.get("samples_per_source"):
        decoding += " (" + ", ".join(f"{name} avg@{k}" for name, k in ev["samples_per_source"].items()) + ")"
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
            from klear_lab.builders import eval_engine
            from klear_lab.distributed import several_devices

            try:
                eval_engine(cfg)
            except Exception as exc:  # noqa: BLE001 - reported in the plan
                # eval_engine refuses several devices, then an engine without start, before it checks the package
                broken = several_devices(cfg["trainer"]) or isinstance(exc, ComponentError)
                engine += f" {UNSUPPORTED if broken else NOT_HERE}: {exc}"
    return "evaluation", f"{decoding}; up to {ev['max_new_tokens']:,} new tokens; {engine}"


def dry_run(cfg: dict[str, Any], source: str | Path | None = None) -> list[tuple[str, str]]:
    """Print the run's plan, titled with ``source`` (the experiment, saved config or run given), and return its
    rows."""
    from klear_lab.build_model import warn_positions
    from klear_lab.runnable import runnable_row

    if cfg["run"]["kind"] == "eval":  # the run's own refusal: a plan of a model it would not score
        from klear_lab.stages.eval import check_eval_model

        check_eval_model(cfg)
    if cfg["run"]["kind"] == "rl":
        probe_rl_components(cfg["rl"])
    config = model_config(cfg)
    warn_positions(cfg, config)
    params = meta_params(config)
    rows = plan_rows(cfg, params) + earlier_run_rows(cfg)
    found = runnable_row(cfg)  # what the run refuses as it starts (`sweep --validate-only` asks too)
    if found and not dict(rows).get(found[0], "").startswith(UNSUPPORTED):  # RL's devices row may say it already
        rows.append((found[0], f"{UNSUPPORTED}: {found[1]}"))
    table = Table(title=f"dry run: {source or cfg['run']['experiment'] or cfg['run']['name']} (meta device, nothing "
                        "loaded)")
    table.add_column("item")
    table.add_column("value", justify="right")
    for k, v in rows:
        table.add_row(escape(k), escape(v))  # values quote errors like "pip install 'klear-lab[vllm]'"
    make_console().print(table)
    return rows
