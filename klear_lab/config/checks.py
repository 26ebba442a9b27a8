"""Cross-field checks, run right after schema validation: before any data or model is loaded."""

from __future__ import annotations

import sys
import unicodedata
import warnings
from pathlib import Path
from typing import Any

from klear_lab.config.sample_checks import check_labelled_samples, check_samples_per_source
from klear_lab.distributed import several_devices
from klear_lab.errors import keyed_error, require
from klear_lab.eval.engine import ENGINES
from klear_lab.models.tokenizer import MIN_VOCAB
from klear_lab.registry import ADVANTAGE, CLIP, REWARD, ROLLOUT

OVERLONG = ("none", "mask", "penalty")
KL = ("k1", "k2", "k3", "kl", "mse", "low_var_kl")
DTYPES = ("float32", "bfloat16", "float16", "float64", "float", "half", "double")  # torch's names
WANDB_MODES = ("offline", "online", "disabled")
WANDB_PROJECT_FORBIDDEN = "/\\#?%:"  # wandb.sdk's check of a project name
PRECISIONS = ("transformer-engine", "transformer-engine-float16", "16-true", "16-mixed", "bf16-true", "bf16-mixed",
              "32-true", "64-true", "64", "32", "16", "bf16")  # lightning.fabric.connector._PRECISION_INPUT (a test
# holds them equal)
EVAL_GRADERS = (("math", "reward"), ("code", "code_reward"))
"""(``Record.task``, key under ``eval``) of each held-out verifier: a record is graded by its task's."""


def check(cfg: dict[str, Any]) -> None:
    require(cfg["run"]["kind"] in ("sft", "rl", "eval"), "run.kind",
            f"must be 'sft', 'rl' or 'eval', got {cfg['run']['kind']!r}")
    require(cfg["optim"]["schedule"] in ("cosine", "constant"), "optim.schedule",
            f"must be 'cosine' or 'constant', got {cfg['optim']['schedule']!r}")
    require(cfg["optim"]["lr"] > 0, "optim.lr", f"must be > 0, got {cfg['optim']['lr']}")
    require(cfg["trainer"]["checkpoint_every"] >= 0, "trainer.checkpoint_every",
            f"must be >= 0 (0 = no checkpoints), got {cfg['trainer']['checkpoint_every']}")
    check_run(cfg)
    check_train_sources(cfg)
    check_optim(cfg["optim"])
    check_eval(cfg["eval"])
    check_labelled_samples(cfg)
    if cfg["run"]["kind"] == "sft":
        check_sft(cfg)
    if cfg["run"]["kind"] == "rl":
        check_rl(cfg)


def check_run(cfg: dict[str, Any]) -> None:
    seed, t, m = cfg["run"]["seed"], cfg["trainer"], cfg["model"]
    require(m["dtype"] in DTYPES, "model.dtype", f"must be one of {', '.join(DTYPES)}, got {m['dtype']!r}")
    # (an eval run without model.name_or_path is refused when it starts, with what to give instead)
    require(m["init_from"] is None or m["name_or_path"] or cfg["run"]["kind"] != "sft", "model.init_from",
            f"({m['init_from']}) is read by RL runs only (the SFT experiment they start from); an SFT run "
            "starts from model.name_or_path (a run directory or HF checkpoint) or a fresh tiny model")
    require(t["num_threads"] >= 0, "trainer.num_threads",
            f"must be >= 0 (0 = cores // parallel workers), got {t['num_threads']}")
    require(m["name_or_path"] or m["tokenizer_vocab"] >= MIN_VOCAB, "model.tokenizer_vocab",
            f"({m['tokenizer_vocab']}) must be >= {MIN_VOCAB}: the tiny model's byte-level BPE starts from "
            f"256 byte tokens and {MIN_VOCAB - 256} special ones, so a smaller vocab would learn no merge")
    require(0 <= seed < 2**32, "run.seed", f"must be in [0, 2**32) (Lightning's and numpy's seed range), got {seed}")
    check_run_name(cfg["run"]["name"], seed)
    require(t["log_every_n_steps"] >= 0, "trainer.log_every_n_steps",
            f"must be >= 0 (0 = no step logging), got {t['log_every_n_steps']}")
    mode = cfg["tracking"]["wandb"]["mode"]
    require(mode in WANDB_MODES, "tracking.wandb.mode", f"must be one of {', '.join(WANDB_MODES)}, got {mode!r}")
    samples = cfg["tracking"]["wandb"]["log_samples"]
    require(samples >= 0, "tracking.wandb.log_samples", f"must be >= 0 (0 = no samples table), got {samples}")
    check_wandb_project(cfg["tracking"]["wandb"]["project"])
    require(str(t["precision"]) in PRECISIONS, "trainer.precision",
            f"must be one of {', '.join(PRECISIONS)} (Lightning's), got {t['precision']!r}")


def check_wandb_project(project: Any) -> None:
    """W&B refuses these project names when the run starts (after the run directory is written): the team goes
    in ``tracking.wandb.entity``, not ``team/project``."""
    bad = sorted({c for c in str(project) if c in WANDB_PROJECT_FORBIDDEN})
    require(not bad, "tracking.wandb.project", f"{project!r} may not contain {' '.join(map(repr, bad))} (W&B's rule"
            "; a team or user goes in tracking.wandb.entity)")
    require(len(str(project)) <= 128, "tracking.wandb.project", f"is {len(str(project))} characters, W&B allows 128")
    # W&B takes these offline and refuses them when the run is synced ("Project name cannot be empty", a newline)
    require(str(project).strip() != "", "tracking.wandb.project", f"{project!r} is empty: name the project "
            "(the default is klear-lab)")
    control = sorted({c for c in str(project) if unicodedata.category(c) == "Cc"})
    require(not control, "tracking.wandb.project", f"{project!r} may not contain {' '.join(map(repr, control))}")


def check_run_name(name: Any, seed: int) -> None:
    """The run directory ``<name>-<time>-<hash>-s<seed>`` must fit in one file name: a longer name failed
    only when the run directory was made, after the data and model were built, blaming ``run.out_dir``."""
    from klear_lab.tracking import RUN_DIR_NAME_MAX, longest_run_dir_name, safe_name

    size, longest = len(safe_name(str(name)).encode()), len(longest_run_dir_name(str(name), seed).encode())
    require(longest <= RUN_DIR_NAME_MAX, "run.name",
            f"is {size} bytes: the run directory <name>-<time>-<hash>-s<seed> would be longer than a file name "
            f"may be ({RUN_DIR_NAME_MAX} bytes); give one of at most {RUN_DIR_NAME_MAX - (longest - size)} bytes")


def check_train_sources(cfg: dict[str, Any]) -> None:
    """SFT and RL runs train on what ``data.sources`` gives: an empty list passed ``--dry-run`` and a sweep's
    checks, and the run stopped only once it read the data. An eval run reads ``data.eval_sources`` alone."""
    kind = cfg["run"]["kind"]
    require(kind not in ("sft", "rl") or bool(cfg["data"]["sources"]), "data.sources",
            f"is empty: an {kind.upper()} run trains on the records its sources give; "
            "list at least one source (`klear-lab components source` lists them)")
    n = cfg["data"]["decontaminate_ngram"]
    require(n >= 0, "data.decontaminate_ngram", f"must be 0 (off) or a word count (the paper's: 9), got {n}")


def check_optim(o: dict[str, Any]) -> None:
    require(o["warmup_steps"] >= 0, "optim.warmup_steps", f"must be >= 0, got {o['warmup_steps']}")
    require(o["schedule"] != "cosine" or 0 <= o["min_lr"] <= o["lr"], "optim.min_lr",
            f"({o['min_lr']:g}) must lie in [0, optim.lr] ({o['lr']:g}): it is the cosine schedule's floor "
            "(set both when lowering optim.lr)")
    # torch's clip_grad_norm_ scales gradients by max_norm / norm: a negative one would reverse them
    require(o["grad_clip"] >= 0, "optim.grad_clip", f"must be >= 0 (0 = no clipping), got {o['grad_clip']}")
    require(o["weight_decay"] >= 0, "optim.weight_decay", f"must be >= 0, got {o['weight_decay']}")
    require(o["bf16_rounding"] in ("stochastic", "nearest"), "optim.bf16_rounding",
            f"must be 'stochastic' or 'nearest', got {o['bf16_rounding']!r}")
    betas = o["betas"]
    require(len(betas) == 2 and all(0 <= b < 1 for b in betas), "optim.betas",
            f"must be two numbers in [0, 1) (AdamW's beta1, beta2), got {list(betas)}")


SFT_LOSSES = ("token-mean", "step-token-mean")


def check_sft(cfg: dict[str, Any]) -> None:
    s, max_len = cfg["sft"], cfg["data"]["max_length"]
    require(s["loss"] in SFT_LOSSES, "sft.loss",
            f"is {s['loss']!r}; one of {', '.join(SFT_LOSSES)} (klear_lab/config/schema.py: SFTSection.loss)")
    require(s["loss"] != "step-token-mean" or not str(cfg["trainer"]["strategy"]).startswith("deepspeed"),
            "sft.loss", f"step-token-mean is not supported with trainer.strategy={cfg['trainer']['strategy']}: "
            "DeepSpeed scales for accumulation itself and counts its windows across epochs")
    require(isinstance(max_len, int) and max_len >= 1, "data.max_length", f"must be >= 1 (tokens), got {max_len}")
    check_sft_launch(cfg["trainer"])
    require(s["max_steps"] >= -1, "sft.max_steps",
            f"must be > 0, or 0 or -1 (no limit: sft.epochs), got {s['max_steps']}")
    rows = s["tokens_per_micro_batch"] // max_len
    require(not (cfg["data"]["pack"] and rows > 1 and cfg["model"]["attn_implementation"] == "flash_attention_2"),
            "sft.tokens_per_micro_batch",
            f"({s['tokens_per_micro_batch']}) gives {rows} packed rows of data.max_length ({max_len}) a micro-batch; "
            "transformers' flash_attention_2 finds packed sequences only in a batch of one row and would let "
            "the packed examples of several rows attend to each other: set it to data.max_length, or use sdpa")
    require(s["grad_accum"] >= 1, "sft.grad_accum", f"must be >= 1, got {s['grad_accum']}")
    require(s["tokens_per_micro_batch"] >= max_len, "sft.tokens_per_micro_batch",
            f"({s['tokens_per_micro_batch']}) is less than one packed row of data.max_length ({max_len}); a "
            "micro-batch holds tokens_per_micro_batch // data.max_length rows")
    require(s["max_steps"] > 0 or s["epochs"] > 0, "sft.epochs",
            f"must be > 0 when sft.max_steps is not set (> 0), got {s['epochs']}")


SPAWNED = ("spawn", "fork", "notebook")  # Lightning strategies that start ranks from inside this process


def check_sft_launch(t: dict[str, Any]) -> None:
    """Several SFT ranks are started by running the command again (``ddp``), never spawned or forked.

    Spawned ranks train in child processes and return to a parent whose loggers never saw their
    metrics: Lightning's CSV logger fails at the end, after the whole training, and the step-aligned
    evaluation hook cannot be pickled. Refused here, before anything is written.
    """
    strategy = str(t["strategy"])
    forked = strategy == "auto" and (hasattr(sys, "ps1") or sys.flags.interactive)  # Lightning's ddp_fork
    require(not (several_devices(t) and (forked or any(k in strategy for k in SPAWNED))), "trainer.strategy",
            f"is {strategy!r} with trainer.devices={t['devices']!r}"
            f"{' in an interactive session (Lightning would fork the ranks)' if forked else ''}: SFT ranks are "
            "started by running the command again, so use trainer.strategy=ddp (or fsdp) from a shell; "
            "spawned or forked ranks would train, then fail to hand their metrics back to this process's loggers")


def check_eval(ev: dict[str, Any]) -> None:
    require(ev["samples"] >= 1, "eval.samples", f"must be >= 1, got {ev['samples']}")
    require(ev["temperature"] >= 0, "eval.temperature", f"must be >= 0 (0 = greedy), got {ev['temperature']}")
    check_samples_per_source(ev)
    require(0 < ev["top_p"] <= 1, "eval.top_p", f"must be in (0, 1], got {ev['top_p']}")
    require(ev["samples"] == 1 or ev["temperature"] > 0, "eval.samples",
            f"is {ev['samples']} with eval.temperature 0: greedy samples are all the same; set "
            "eval.temperature (the paper's avg@k: 0.6 with eval.top_p 0.95)")
    require(ev["top_p"] == 1 or ev["temperature"] > 0, "eval.top_p",
            f"is {ev['top_p']} with eval.temperature 0 (greedy), where it has no effect; set eval.temperature")
    top_k = ev["top_k"]
    require(isinstance(top_k, int) and not isinstance(top_k, bool) and top_k >= 0, "eval.top_k",
            f"must be an integer >= 0 (0 = off), got {top_k!r}")
    require(top_k == 0 or ev["temperature"] > 0, "eval.top_k",
            f"is {top_k} with eval.temperature 0 (greedy), where it has no effect; set eval.temperature")
    require(ev["repetition_penalty"] > 0, "eval.repetition_penalty",
            f"must be > 0 (1 = off), got {ev['repetition_penalty']}")
    require(ev["batch_size"] >= 1 and ev["max_new_tokens"] >= 1, "eval.batch_size/eval.max_new_tokens",
            "must be >= 1")
    require(ev["every_n_steps"] >= 0, "eval.every_n_steps",
            f"must be >= 0 (0 = none during training), got {ev['every_n_steps']}")
    require(ev["engine"] in ENGINES, "eval.engine", f"must be one of {ENGINES}, got {ev['engine']!r}")
    check_eval_graders(ev)


def check_eval_graders(ev: dict[str, Any]) -> None:
    """Each held-out verifier grades its task's records (``EVAL_GRADERS``): a reward that declares ``tasks``
    without that task (``eval.reward=code``) would mark every right answer wrong, and ``val/acc`` read 0
    with no error. A reward that declares no ``tasks`` is trusted, as ``rl.reward``'s check does."""
    for task, key in EVAL_GRADERS:
        name = ev[key]["name"]
        tasks = getattr(REWARD.get(name), "tasks", None)
        if tasks is not None and task not in tasks:
            fitting = ", ".join(n for n in REWARD.names() if task in reward_tasks(n))
            raise keyed_error(f"eval.{key}.name", f"eval.{key} grades the held-out {task} records, but {name!r} "
                              f"scores {'/'.join(tasks)} tasks: choose a reward of {task} tasks ({fitting})")


def reward_tasks(reward: str) -> tuple[str, ...]:
    """The tasks a registered reward declares it scores (none declared: ())."""
    return tuple(getattr(REWARD.get(reward), "tasks", None) or ())


SEQUENCE_AGGREGATION = "seq-mean-token-mean"  # what a sequence-level clip (GSPO) is defined with


def check_rl(cfg: dict[str, Any]) -> None:
    rl = cfg["rl"]
    adv = ADVANTAGE.get(rl["advantage"]["name"])
    need = getattr(adv, "min_group_size", 1)
    require(rl["group_size"] >= need, "rl.group_size",
            f"is {rl['group_size']} but advantage {rl['advantage']['name']!r} needs groups of at least {need}")
    require(rl["prompts_per_step"] >= 1, "rl.prompts_per_step", "must be >= 1")
    clip, agg = rl["clip"]["name"], rl["aggregation"]["name"]
    require(not getattr(CLIP.get(clip), "seq_level", False) or agg == SEQUENCE_AGGREGATION, "rl.aggregation",
            f"is {agg!r}, but clip {clip!r} clips whole sequences and its objective averages each "
            f"sequence's tokens: set rl.aggregation={SEQUENCE_AGGREGATION} (verl forces it); {agg!r} would "
            "weight sequences by their length")
    require(rl["minibatch_prompts"] >= 1, "rl.minibatch_prompts", f"must be >= 1, got {rl['minibatch_prompts']}")
    require(rl["prompts_per_step"] % rl["minibatch_prompts"] == 0, "rl.minibatch_prompts",
            f"({rl['minibatch_prompts']}) must divide rl.prompts_per_step ({rl['prompts_per_step']})")
    require(rl["steps"] >= 1, "rl.steps", f"must be >= 1, got {rl['steps']}")
    require(0 <= rl["max_kept_prompts"] <= rl["prompts_per_step"], "rl.max_kept_prompts",
            f"({rl['max_kept_prompts']}) must be in [0, rl.prompts_per_step={rl['prompts_per_step']}] (0: all kept)")
    require(rl["lr_schedule_unit"] in ("rollout_step", "update"), "rl.lr_schedule_unit",
            f"must be 'rollout_step' or 'update', got {rl['lr_schedule_unit']!r}")
    require(rl["temperature"] > 0, "rl.temperature", "must be > 0 for sampling rollouts")
    require(rl["top_p"] == 1, "rl.top_p",
            f"is {rl['top_p']}, but only 1 is supported (the paper's): the update's old and new log-probs are those "
            "of the whole tempered softmax, while nucleus sampling draws from the renormalised top-p part, so the "
            "PPO ratio would be silently off-policy")
    require(rl["overlong"] in OVERLONG, "rl.overlong", f"must be one of {OVERLONG}, got {rl['overlong']!r}")
    require(rl["kl_estimator"] in KL, "rl.kl_estimator", f"must be one of {KL}, got {rl['kl_estimator']!r}")
    require(rl["alpha"] >= 0 and rl["kl_coef"] >= 0, "rl.alpha/rl.kl_coef", "must be >= 0")
    if rl["kl_coef"] > 0 and rl["kl_estimator"] in ("k1", "kl"):
        warnings.warn(f"rl.kl_estimator={rl['kl_estimator']} with rl.kl_coef={rl['kl_coef']}: as a loss term, k1's "
                      "gradient (that of log pi on the sampled tokens) averages to 0, so it adds noise and no pull "
                      "toward the reference; k3 (the default, verl low_var_kl) or k2 pull toward it", UserWarning,
                      stacklevel=2)
    require(rl["ppo_epochs"] >= 1, "rl.ppo_epochs", "must be >= 1")
    require(rl["max_new_tokens"] >= 1, "rl.max_new_tokens", "must be >= 1")
    require(rl["logp_chunk_tokens"] >= 0, "rl.logp_chunk_tokens",
            f"must be >= 0 (0 = all response tokens at once), got {rl['logp_chunk_tokens']}")
    require(rl["micro_batch_seqs"] >= 0, "rl.micro_batch_seqs",
            f"must be >= 0 (0 = the whole minibatch at once), got {rl['micro_batch_seqs']}")
    require(rl["eval_every"] >= 0, "rl.eval_every", f"must be >= 0 (0 = none during training), got {rl['eval_every']}")
    require(rl["overlong"] != "penalty" or 0 < rl["overlong_buffer"] <= rl["max_new_tokens"], "rl.overlong_buffer",
            f"({rl['overlong_buffer']}) must be in (0, rl.max_new_tokens={rl['max_new_tokens']}] with "
            "rl.overlong=penalty: the penalty ramps over the last overlong_buffer tokens")
    require(rl["overlong_penalty"] >= 0, "rl.overlong_penalty", f"must be >= 0, got {rl['overlong_penalty']}")
    require(rl["max_prompt_tokens"] >= 0, "rl.max_prompt_tokens",
            f"must be >= 0 (0 = no cap), got {rl['max_prompt_tokens']}")
    ROLLOUT.get(rl["rollout"]["name"])  # availability (vllm installed?) is checked when a run starts
    cap = rl["rollout"].get("max_model_len") or 0  # the prompt must fit too: checked per call by the engine
    require(not cap or cap > rl["max_new_tokens"], "rl.rollout.max_model_len",
            f"({cap}) leaves no room for a prompt before rl.max_new_tokens ({rl['max_new_tokens']}): vLLM "
            "would cut every long response at it; raise it or lower rl.max_new_tokens")
    m = cfg["model"]
    if not m["name_or_path"] and m["init_from"]:
        require(Path(m["init_from"]).is_file(), "model.init_from", f"{m['init_from']!r}: no such experiment file")


def warn_unused_model_shape(cfg: dict[str, Any], provenance: dict[str, str], default: dict[str, Any],
                            starting: dict[str, Any] | None = None) -> None:
    """An RL run with ``model.init_from`` trains the starting experiment's model: a ``model.tiny`` or
    ``model.tokenizer_vocab`` set for it builds nothing, and ``model.tiny.size=10m`` still trained 2m. Say which
    were set (``provenance``: the layer that set each key) to other than the schema's ``default`` model section
    (a saved config writes out every default) and than the ``starting`` experiment's own (a shared ``base:``
    that sets both alike is no mistake; None: it could not be composed here)."""
    m = cfg["model"]
    if not m["init_from"] or m["name_or_path"]:
        return

    def flat(section: dict[str, Any]) -> dict[str, Any]:
        return {"model.tiny": section["tiny"], "model.tokenizer_vocab": section["tokenizer_vocab"],
                **{f"model.tiny.{k}": v for k, v in section["tiny"].items()}}

    ours, schema, theirs = flat(m), flat(default), flat(starting) if starting else {}
    changed = [key for key in ours if key in provenance and ours[key] != schema.get(key)
               and (key not in theirs or ours[key] != theirs[key])]
    if "model.tiny" in changed:  # the whole node set: not each of its keys as well
        changed = [key for key in changed if not key.startswith("model.tiny.")]
    changed = sorted(f"{key} ({provenance[key]})" for key in changed)
    if changed:
        warnings.warn(f"{', '.join(changed)}: not used: the run starts from model.init_from {m['init_from']}'s "
                      "model; its shape is set in that experiment", UserWarning, stacklevel=3)
