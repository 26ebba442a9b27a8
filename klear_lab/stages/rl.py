"""The RL stage: prompts, policy (from an SFT run), rollout engine and RL components from a config."""

from __future__ import annotations

import random
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from torch.utils.data import DataLoader

from klear_lab import builders, starting_point
from klear_lab.build_model import build_tokenizer_and_model
from klear_lab.checkpointing import batches_trained, resume_callback
from klear_lab.data.overlap import warn_trained_heldout
from klear_lab.data.records import Record, data_digests, require_gradeable
from klear_lab.data.sft import prompt_ids as chat_prompt_ids
from klear_lab.distributed import multi_device_rl_problem
from klear_lab.errors import ConfigError, DataError
from klear_lab.loggers import make_loggers
from klear_lab.modules.rl import RLModule
from klear_lab.modules.rl_parts import RLSettings
from klear_lab.registry import ADVANTAGE, AGGREGATION, CLIP, GROUP_FILTER, REWARD, ROLLOUT
from klear_lab.resumable_loader import ResumableLoader
from klear_lab.reward_checks import reward_task_message
from klear_lab.rl.advantages.base import probe_advantage
from klear_lab.rl.aggregation.base import probe_aggregation
from klear_lab.rl.clip.base import probe_clip
from klear_lab.rl.group_filters.base import probe_group_filter
from klear_lab.rl.objective import ObjectiveWeights
from klear_lab.rl.rollout.checks import check_fits, check_rollout_engine, check_rollout_runtime
from klear_lab.rl.token_stats import check_chunkable
from klear_lab.stages.common import (
    check_trainer,
    check_wandb_login,
    finish_loggers,
    make_trainer,
    save_model,
    wandb_logger,
    write_samples,
)
from klear_lab.stages.gain import gain_summary
from klear_lab.stages.rl_plan import schedule_steps


def prompt_batches(records: list[Record], batch: int, steps: int, seed: int) -> list[list[Record]]:
    """``steps`` batches of ``batch`` prompts, walking seeded shuffles of the pool (epochs as needed)."""
    rng, order, out = random.Random(seed), [], []
    for _ in range(steps):
        if len(order) < batch:
            fresh = list(range(len(records)))
            rng.shuffle(fresh)
            if len(records) >= batch:  # the last epoch's leftovers go later in the new one, not twice in a step
                left = set(order)
                fresh = [i for i in fresh if i not in left] + [i for i in fresh if i in left]
            order += fresh
        out.append([records[i] for i in order[:batch]])
        order = order[batch:]
    return out


@dataclass
class RLStage:
    cfg: dict[str, Any]
    module: RLModule
    batches: list[list[Record]]
    data_stats: dict[str, float]  # prompt pool after filter and mix (data/records, data/kept_frac/<source>)
    data: dict[str, str] = field(default_factory=dict)  # records_digest of the train and eval records

    def close(self) -> None:
        """Stop the rollout engine ``prepare_rl`` started, for a run refused before ``execute``."""
        self.module.engine.close()

    def execute(self, run_dir: Path, identity: dict[str, Any], callbacks: list,
                resume: Path | None = None) -> tuple[dict[str, float], Path | None]:
        """Train and evaluate into ``run_dir``; ``resume``: a ``last.ckpt`` of this run to continue from."""
        cfg, rl = self.cfg, self.cfg["rl"]
        loggers = make_loggers(cfg, run_dir, identity)
        checkpoints = resume_callback(cfg, run_dir, batches_trained, rl["eval_every"])  # every N rollout steps
        trainer = make_trainer(
            cfg, run_dir, loggers, max_steps=-1, callbacks=[*rl_callbacks(), checkpoints, *callbacks],
            val_check_interval=rl["eval_every"] or None, max_epochs=1,
            # every rollout step (seconds here, minutes at scale), as verl: Lightning's interval of 5 kept one
            # point in five of the reward and clip curves; trainer.log_every_n_steps=0 still turns it off
            log_every_n_steps=min(cfg["trainer"]["log_every_n_steps"], 1),
            use_distributed_sampler=False,  # under DDP every rank takes the whole step; the module splits it
        )
        loader = ResumableLoader(self.batches, batch_size=None, shuffle=False, collate_fn=lambda b: b,
                                 skip=checkpoints.skip)
        val = DataLoader([0], batch_size=1)
        try:
            if resume is None:  # the starting point (a resumed run restores its evaluations from the checkpoint)
                for logger in loggers:
                    logger.log_metrics(self.data_stats, step=0)
                trainer.validate(self.module, dataloaders=val, verbose=False)
            start = time.perf_counter()
            with warnings.catch_warnings():
                if self.module.reference is not None:  # frozen, in eval mode on purpose; the policy trains
                    warnings.filterwarnings("ignore", r"Found \d+ module\(s\) in eval mode", PossibleUserWarning)
                trainer.fit(self.module, train_dataloaders=loader, val_dataloaders=val, ckpt_path=resume,
                            weights_only=True)
            train_s = time.perf_counter() - start
            warn_if_never_updated(trainer.global_step, len(self.batches), rl)
            last_train = {k: float(v) for k, v in trainer.callback_metrics.items()
                          if k.startswith(("train/", "perf/", "rl/", "reward/"))}
            save_model(self.module.policy, self.module.tokenizer, run_dir / "model")  # kept if evaluation fails
            if (not rl["eval_every"] or len(self.batches) % rl["eval_every"]
                    or not any(k.startswith("val/") for k in trainer.callback_metrics)):  # resumed at the end
                trainer.validate(self.module, dataloaders=val, verbose=False)  # eval.engine rollout: still running
        finally:
            self.module.engine.close()
        metrics = {**last_train, **{k: float(v) for k, v in trainer.callback_metrics.items() if "/" in k}}
        metrics.update(gain_summary(self.module.evals))
        if self.module.evals:
            write_samples(run_dir / "eval_samples.jsonl", self.module.evals[-1][1])  # the final evaluation
        metrics.update(self.data_stats)
        metrics.update({"perf/train_seconds": train_s, "rl/rollout_steps": float(len(self.batches)),
                        "train/steps": float(trainer.global_step),
                        "perf/torch_threads": float(torch.get_num_threads()),
                        "perf/world_size": float(trainer.world_size)})
        wb = wandb_logger(loggers)
        if wb is not None and self.module.last_samples:
            wb.log_table(key="rollout/samples", columns=["prompt", "response", "answer", "reward"],
                         data=self.module.last_samples[: cfg["tracking"]["wandb"]["log_samples"]])
        return metrics, finish_loggers(loggers, metrics)


def warn_if_never_updated(updates: int, rollout_steps: int, rl: dict[str, Any]) -> None:
    """A run whose every group was filtered out (the zero-variance filter: no group's responses differed in
    its metric) completes with the starting model and ``val/gain`` 0; an ablation would compare it as if it
    had trained."""
    if updates == 0 and rollout_steps > 0:
        name, why = rl["group_filter"]["name"], ""
        if name == "zero_variance":
            why = (" (it drops groups whose responses are all fully correct or all not, rl.group_filter.metric=acc: "
                   "no group had both)" if rl["group_filter"].get("metric") == "acc" else
                   " (it drops groups whose responses all scored alike: rl.reward scored every group so)")
        warnings.warn(f"the policy was never updated: none of the {rollout_steps} rollout steps had a group to "
                      f"train on (rl/trained_groups 0: rl.group_filter={name} kept none{why}); its evaluations are "
                      "of the starting model", UserWarning, stacklevel=2)


def rl_callbacks() -> list:
    from lightning.pytorch.callbacks import LearningRateMonitor, RichProgressBar

    return [LearningRateMonitor(logging_interval="step"), RichProgressBar(leave=True)]


def check_reward_tasks(reward: str, records: list[Record]) -> None:
    """RL scores every prompt with the one ``rl.reward``: a math reward would grade code records by
    matching the reference program's text, and run nothing. A reward that declares ``tasks`` must
    cover every training record's task (one that declares none is trusted). The dry run and a sweep's
    up-front checks refuse it from the config already (``reward_checks.reward_task_problem``)."""
    tasks = getattr(REWARD.get(reward), "tasks", None)
    if tasks is None:
        return
    other = Counter(r.task for r in records if r.task not in tasks)
    if other:
        found = ", ".join(f"{n} {task}" for task, n in other.most_common())
        raise ConfigError(reward_task_message(reward, f"data.sources hold {found} record(s) of {len(records)}",
                                              set(other)))


def drop_long_prompts(records: list[Record], tokenizer: Any, cap: int) -> tuple[list[Record], int]:
    """The records whose chat-formatted prompt has at most ``cap`` tokens, and how many were dropped.

    Raises:
        DataError: every prompt is longer.
    """
    lengths = [len(chat_prompt_ids(tokenizer, r.prompt)) for r in records]
    kept = [r for r, n in zip(records, lengths) if n <= cap]
    if not kept:
        raise DataError(f"rl.max_prompt_tokens={cap}: all {len(records)} training prompts are longer (the shortest "
                        f"has {min(lengths)} tokens, chat-formatted): raise it")
    return kept, len(records) - len(kept)


def prepare_rl(cfg: dict[str, Any]) -> RLStage:
    """Builds everything; bad input fails here, before a run directory exists."""
    rl = cfg["rl"]
    problem = multi_device_rl_problem(cfg)  # first: it says why RL cannot use FSDP at all
    if problem:
        raise ConfigError(problem)
    check_trainer(cfg)
    check_wandb_login(cfg)
    builders.set_threads(cfg)
    L.seed_everything(cfg["run"]["seed"], workers=True, verbose=False)
    probe_clip(builders.build(CLIP, rl["clip"]), "rl.clip")  # a plugin's bug: before any data or model loads
    probe_advantage(builders.build(ADVANTAGE, rl["advantage"]), "rl.advantage")
    probe_aggregation(builders.build(AGGREGATION, rl["aggregation"]), "rl.aggregation")
    probe_group_filter(builders.build(GROUP_FILTER, rl["group_filter"]), "rl.group_filter")
    engine_cfg = builders.build(ROLLOUT, rl["rollout"])
    check_rollout_engine(engine_cfg, "rl.rollout")
    if hasattr(engine_cfg, "check_available"):
        engine_cfg.check_available()
    records, data_stats, eval_records = builders.build_run_records(cfg)  # decontaminated (data.decontaminate_ngram)
    if not records:
        raise DataError("RL needs prompts: data.sources produced none")
    check_reward_tasks(rl["reward"]["name"], records)
    require_gradeable(records, "data.sources")
    warn_trained_heldout(records, eval_records)  # exact matches that decontamination, when on, left
    digests = data_digests(records, eval_records)  # as built: the prompt-length cap depends on the tokenizer
    sampling = builders.eval_sampling(cfg, eval_records)
    starting_point.resolve_init_from(cfg)
    tokenizer, policy = build_tokenizer_and_model(cfg, builders.tokenizer_corpus(records, eval_records))
    if rl["logp_chunk_tokens"]:
        try:
            check_chunkable(policy)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
    if rl["max_prompt_tokens"]:
        records, dropped = drop_long_prompts(records, tokenizer, rl["max_prompt_tokens"])
        kept_stats = {k: v for k, v in data_stats.items() if not k.startswith("data/mix_share/")}  # a source may go
        data_stats = {**kept_stats, **builders.record_stats(records), "data/dropped_long_prompts": float(dropped)}
    steps = rl["steps"]
    settings = RLSettings(
        group_size=rl["group_size"], minibatch_prompts=rl["minibatch_prompts"], micro_batch_seqs=rl["micro_batch_seqs"],
        ppo_epochs=rl["ppo_epochs"], max_new_tokens=rl["max_new_tokens"], temperature=rl["temperature"],
        top_p=rl["top_p"], grad_clip=cfg["optim"]["grad_clip"], overlong=rl["overlong"],
        overlong_buffer=rl["overlong_buffer"], overlong_penalty=rl["overlong_penalty"], seed=cfg["run"]["seed"],
        max_eval_new_tokens=cfg["eval"]["max_new_tokens"], eval_batch_size=cfg["eval"]["batch_size"],
        eval_sampling=sampling, schedule_per_update=rl["lr_schedule_unit"] == "update",
        max_kept_prompts=rl["max_kept_prompts"], logp_chunk_tokens=rl["logp_chunk_tokens"],
    )
    parts = {
        "reward": builders.build(REWARD, rl["reward"]), "advantage": builders.build(ADVANTAGE, rl["advantage"]),
        "clip": builders.build(CLIP, rl["clip"]), "aggregation": builders.build(AGGREGATION, rl["aggregation"]),
        "group_filter": builders.build(GROUP_FILTER, rl["group_filter"]),
        "weights": ObjectiveWeights(alpha=rl["alpha"], entropy_coef=rl["entropy_coef"], kl_coef=rl["kl_coef"],
                                    kl_estimator=rl["kl_estimator"]),
        "settings": settings, "optim": builders.optim_settings(cfg, schedule_steps(rl)), "eval_records": eval_records,
        "eval_rewards": builders.build_eval_rewards(cfg), "use_reference": rl["kl_coef"] > 0,
    }
    engine = engine_cfg.start(policy, tokenizer)  # last: nothing after it may leave it running
    check_rollout_runtime(engine, engine_cfg, "rl.rollout")  # closes it when it refuses it
    try:
        check_fits(engine, [r.prompt for r in records], rl["max_new_tokens"], "data.sources")
        if cfg["eval"]["engine"] == "rollout":
            check_fits(engine, [r.prompt for r in eval_records], cfg["eval"]["max_new_tokens"], "data.eval_sources")
        module = RLModule(policy, tokenizer, engine=engine, eval_engine=builders.eval_engine(cfg, shared=engine),
                          **parts)
    except BaseException:
        engine.close()
        raise
    batches = prompt_batches(records, rl["prompts_per_step"], steps, cfg["run"]["seed"])
    return RLStage(cfg, module, batches, data_stats, digests)
