"""SFT LightningModule: masked token cross-entropy on packed rows; held-out evaluation (greedy or avg@k)."""

from __future__ import annotations

import time

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.strategies import FSDPStrategy

from klear_lab.checkpointing import optimizer_steps
from klear_lab.data.records import Record
from klear_lab.data.sft import IGNORE
from klear_lab.distributed import rank_and_world
from klear_lab.eval.engine import EvalEngine
from klear_lab.eval.heldout import GREEDY, EvalResult, Sampling, evaluate_sharded
from klear_lab.modules.eval_step import log_at_updates_done
from klear_lab.modules.optim import OptimSettings, check_grad_norm, configure_adamw, noise_stream, parameter_ndims


def masked_token_ce(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum of token cross-entropies over non-ignored labels, and their count.

    Shapes: logits [B, L, V], labels [B, L] (already shifted: position t predicts labels[t]).
    """
    flat = labels.reshape(-1)
    keep = flat != IGNORE
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1])[keep].float(), flat[keep], reduction="sum")
    return loss, keep.sum()


class SFTModule(L.LightningModule):
    """Thin system: a causal LM, its tokenizer and the eval verifiers are injected."""

    def __init__(self, model, tokenizer, *, optim: OptimSettings, eval_rewards: dict,
                 eval_records: list[Record], max_new_tokens: int, eval_batch_size: int,
                 eval_sampling: Sampling = GREEDY, eval_engine: EvalEngine | None = None, log_samples: int = 8,
                 compile_forward: bool = False, loss: str = "token-mean") -> None:
        super().__init__()
        self.loss_kind = loss
        self.model, self.tokenizer, self.optim = model, tokenizer, optim
        self._ndims = parameter_ndims(model)  # before a strategy wraps it (weight decay on matrices)
        # Only the training forward is compiled: generation in evaluation keeps the eager model (its
        # shapes change every token). A bound method is not a submodule, so checkpoints keep their keys.
        self._train_forward = torch.compile(model.forward) if compile_forward else model.forward
        self.eval_rewards, self.eval_records = eval_rewards, eval_records
        self.max_new_tokens, self.eval_batch_size, self.log_samples = max_new_tokens, eval_batch_size, log_samples
        self.eval_sampling, self.eval_engine = eval_sampling, eval_engine
        self.last_eval: EvalResult | None = None
        self._tokens = 0.0  # real tokens trained by the finished steps, every rank's (kept in checkpoints)
        # perf/tokens_per_s: this process's tokens over its training seconds (see on_train_batch_end)
        self._tokens_at_start, self._train_s = 0.0, 0.0
        self._batch_t0: float | None = None  # when this micro-batch's training began
        self._trained_until: float | None = None  # when its training work (backward, optimizer step) ended
        self.eval_seconds = 0.0  # perf/eval_seconds: this process's evaluations, fit's and the final one
        self._window: torch.Tensor | None = None  # [4] this step's loss sum, loss tokens, real, total tokens
        self._window_all = torch.zeros(4)  # [4] the same, summed over ranks

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        # use_cache=False: with no cache and no attention mask, transformers derives the packed
        # block-diagonal mask from the position ids (sequences restart at 0).
        return self._train_forward(input_ids=input_ids, position_ids=position_ids, use_cache=False).logits

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        logits = self(batch["input_ids"], batch["position_ids"])  # [B, L, V]
        loss_sum, n_tokens = masked_token_ce(logits, batch["labels"])
        if self.loss_kind == "token-mean":  # the mean of the step's micro-batch means
            objective = loss_sum / n_tokens.clamp(min=1) * self._short_window_scale(batch)
        else:
            objective = loss_sum * self._step_scale(batch)
        seen = self._add_to_window(loss_sum, n_tokens, batch)  # [4] the step so far, every rank's
        step_loss = seen[0] / seen[1].clamp(min=1)  # what is logged: the step's loss per response token
        # Lightning logs a step's last value: at the step's last micro-batch, the whole step's
        self.log_dict({
            "train/loss": step_loss,
            "perf/packing_efficiency": seen[2] / seen[3].clamp(min=1),
            "train/tokens": self._tokens + float(seen[2]),
        }, prog_bar=False, on_step=True, on_epoch=False)
        self.log("loss", step_loss, prog_bar=True, logger=False)
        return objective

    def on_train_batch_start(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._batch_t0, self._trained_until = time.perf_counter(), None

    def on_after_backward(self) -> None:
        self._mark_trained()  # a micro-batch within an accumulation window ends here

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer, optimizer_closure=None) -> None:
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        self._mark_trained()

    def _mark_trained(self) -> None:
        """Stamp the end of training work, its CUDA kernels finished first: else the next host sync (the progress
        bar's ``.item()``, a checkpoint's state dict) waits for them outside the counted seconds."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self._trained_until = time.perf_counter()

    def on_train_batch_end(self, outputs, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        """Count this micro-batch's training seconds; at a step's end (its tokens counted by ``_end_window``)
        log the throughput so far.

        Training seconds are the micro-batches' own, summed: each from this module's ``on_train_batch_start``
        to its backward's end, a step's last micro-batch to its optimizer step's end. Not counted: loading
        the batch, the callbacks' batch hooks (a checkpoint written at a step's end, by ``ResumeCheckpoint``
        whose ``on_train_batch_end`` runs before this one, or renamed into place at the next batch's start),
        logging, and the evaluations between steps (and a checkpoint written after one). Measured as fit's
        time less its evaluations, it counted a checkpoint written at a step's end, not one after an evaluation."""
        if self._batch_t0 is not None:
            end = time.perf_counter() if self._trained_until is None else self._trained_until
            self._train_s += end - self._batch_t0
            self._batch_t0 = None
        if self._window is None:
            self.log("perf/tokens_per_s", self.tokens_per_s(), on_step=True, on_epoch=False)

    def tokens_per_s(self) -> float:
        """Tokens trained (every rank's real tokens) per second of training, this process's steps."""
        return (self._tokens - self._tokens_at_start) / max(self._train_s, 1e-9)

    def _add_to_window(self, loss_sum: torch.Tensor, n_tokens: torch.Tensor,
                       batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Add this micro-batch to the step's sums; return them summed over ranks ([4]: loss, loss tokens,
        real tokens, row tokens)."""
        counts = [batch[k].float().to(self.device) for k in ("real_tokens", "total_tokens")]
        mine = torch.stack([loss_sum.detach().float(), n_tokens.float(), *counts])
        self._window = mine if self._window is None else self._window + mine
        self._window_all = self.trainer.strategy.reduce(self._window.clone(), reduce_op="sum")  # DDP: in place
        return self._window_all

    def _short_window_scale(self, batch: dict[str, torch.Tensor]) -> float:
        """``token-mean``: Lightning divides each micro-batch by ``accumulate_grad_batches``, also in an
        epoch's last window when it holds fewer; scale those back, so every step averages its own."""
        if "step_micro_batches" not in batch or self.trainer.strategy.handles_gradient_accumulation:
            return 1.0  # DeepSpeed accumulates itself, in windows counted over epochs: not the loader's
        return self.trainer.accumulate_grad_batches / int(batch["step_micro_batches"])

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["klear_sft_tokens"] = self._tokens  # train/tokens goes on counting after a resume

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self._tokens = self._tokens_at_start = float(checkpoint.get("klear_sft_tokens", 0.0))

    def _step_scale(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``step-token-mean``: 1 / the loss tokens of the whole step (every micro-batch, every rank), times
        what Lightning's accumulation (÷ accumulate_grad_batches) and DDP/FSDP (mean over ranks) divide."""
        tokens = batch["step_label_tokens"].to(self.device, torch.float32)
        total = self.trainer.strategy.reduce(tokens, reduce_op="sum")
        return self.trainer.accumulate_grad_batches * self.trainer.world_size / total.clamp(min=1)

    def on_before_optimizer_step(self, optimizer) -> None:
        """Log ``train/grad_norm``: the whole gradient's L2 norm before clipping, the step's (after
        accumulation and the ranks' all-reduce). FSDP holds a shard per rank: their squares are summed."""
        self._end_window()
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        sharded = isinstance(self.trainer.strategy, FSDPStrategy)
        if not grads and not sharded:  # an engine that keeps gradients elsewhere (DeepSpeed)
            return
        device = self.trainer.strategy.root_device  # where the reduce runs (FSDP may offload grads to the CPU)
        norms = [torch.linalg.vector_norm(g.detach(), dtype=torch.float32).to(device) for g in grads]  # [params]
        squares = torch.stack(norms).pow(2).sum() if norms else torch.zeros((), device=device)
        if sharded:  # every rank takes part, even one without a shard
            squares = self.trainer.strategy.reduce(squares, reduce_op="sum")
        self.log("train/grad_norm", squares.sqrt(), on_step=True, on_epoch=False)
        check_grad_norm(self.trainer, float(squares))  # the same on every rank: all stop, none waits in a reduce

    def _end_window(self) -> None:
        """The step's micro-batches are all in: count its tokens, start the next step's sums."""
        if self._window is not None:
            self._tokens += float(self._window_all[2])
            self._window = None

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        """Under FSDP, clip by the whole sharded gradient's norm with FSDP's own ``clip_grad_norm_``: Lightning's
        FSDP precision plugin refuses norm clipping, which failed the paper's FSDP SFT (``optim.grad_clip``
        1.0) at its first step. Elsewhere, Lightning's clipping."""
        if gradient_clip_val and isinstance(self.trainer.strategy, FSDPStrategy):
            self.trainer.model.clip_grad_norm_(gradient_clip_val)
            return
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def validation_step(self, batch: list[Record], batch_idx: int) -> None:
        """Evaluation runs once per validation epoch in ``on_validation_epoch_end``."""

    def on_validation_epoch_end(self) -> None:
        if not self.eval_records or self.trainer.sanity_checking:
            return
        start = time.perf_counter()  # the evaluation only: not a checkpoint its callbacks' hooks write
        rank, world = rank_and_world(self)
        result = evaluate_sharded(self.model, self.tokenizer, self.eval_records, self.eval_rewards,
                                  self.max_new_tokens, self.eval_batch_size, self.eval_sampling, self.eval_engine,
                                  rank, world)
        self.last_eval = result
        metrics = result.metrics("val")
        self.log_dict(metrics, prog_bar=False, sync_dist=True)  # equal on every rank: the mean is the value
        self.log("val_acc", metrics["val/acc"], prog_bar=True, logger=False, sync_dist=True)
        log_at_updates_done(self, self.updates_done(), sync_dist=True)
        self.eval_seconds += time.perf_counter() - start

    def updates_done(self) -> int:
        """Optimizer steps taken: the step of an evaluation's row and of its pruning report."""
        return optimizer_steps(self.trainer)

    def configure_optimizers(self):
        return configure_adamw(self.model, self.optim, self._ndims, noise_stream(self.trainer))
