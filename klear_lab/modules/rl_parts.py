"""The RL module's self-contained pieces, which :class:`klear_lab.modules.rl.RLModule` uses: its settings
(``RLSettings``), ``disable_dropout`` for the policy, the overlong handling of a rollout batch's rewards
(``shape_rewards``) and the α term's positives (``sft_positives``), its statistics (``rollout_metrics``),
``float_metrics`` for a micro-step's objective metrics and ``forget_unlogged``, which keeps a step's row to the
metrics it logs.
"""

from __future__ import annotations

from dataclasses import dataclass

import lightning as L
import torch

from klear_lab.errors import component_error
from klear_lab.eval.heldout import GREEDY, Sampling
from klear_lab.rl.clip.base import metric_problem
from klear_lab.rl.overlong import overlong_penalty


@dataclass(frozen=True)
class RLSettings:
    group_size: int
    minibatch_prompts: int
    micro_batch_seqs: int
    ppo_epochs: int
    max_new_tokens: int
    temperature: float
    top_p: float
    grad_clip: float
    overlong: str
    overlong_buffer: int
    overlong_penalty: float
    seed: int
    max_eval_new_tokens: int
    eval_batch_size: int
    eval_sampling: Sampling = GREEDY
    max_kept_prompts: int = 0  # train on at most this many kept groups (0: all)
    schedule_per_update: bool = False  # rl.lr_schedule_unit=update: the LR schedule steps at each update
    logp_chunk_tokens: int = 0  # LM head over this many response tokens at a time (0: all)


def disable_dropout(model: torch.nn.Module) -> torch.nn.Module:
    """Zero every dropout rate, keeping train mode (gradient checkpointing needs it).

    Ratios compare log-probs of the same weights: with dropout, old (rollout-time) and new
    log-probs differ by noise and an on-policy ratio is not 1. TRL's ``disable_dropout`` does the same.
    """
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        if isinstance(getattr(module, "attention_dropout", None), (int, float)):  # HF attention
            module.attention_dropout = 0.0
    return model


def shape_rewards(scores: torch.Tensor, rollout, s: RLSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """Overlong handling: a soft penalty on the scores, or truncated responses leave the loss."""
    mask = rollout.response_mask.float()  # [N, T]
    if s.overlong == "penalty":
        lengths = mask.sum(-1)
        pen = overlong_penalty(lengths, s.max_new_tokens, s.overlong_buffer, s.overlong_penalty)
        scores = scores + pen.view_as(scores)
    elif s.overlong == "mask":
        mask = mask * rollout.finished.float()[:, None]
    return scores, mask


def sft_positives(acc: torch.Tensor, scores: torch.Tensor, shaped: torch.Tensor) -> torch.Tensor:
    """The α term's positives [B, G] bool: fully correct (``acc``) and not lowered by the overlong penalty,
    as the official code's ``sum(token_level_rewards) == 1.0`` (paper.md §1.4): a correct answer in the
    penalty buffer is no example to imitate. ``rl.overlong: mask`` already takes cut rows out of the loss."""
    return acc & (shaped >= scores)


def rollout_metrics(groups, scores: torch.Tensor, keep: torch.Tensor, rollout) -> dict[str, float]:
    """Reward, accuracy, length and filter statistics of one rollout batch."""
    lengths = rollout.response_mask.float().sum(-1)
    return {
        "reward/mean": float(scores.mean()), "reward/std": float(scores.std()) if scores.numel() > 1 else 0.0,
        "reward/acc": float(groups.acc.float().mean()), "reward/format_rate": float(groups.format_ok.float().mean()),
        "rl/response_len_mean": float(lengths.mean()), "rl/response_len_max": float(lengths.max()),
        "rl/truncated_frac": float((~rollout.finished).float().mean()),
        "rl/kept_group_frac": float(keep.float().mean()), "rl/dropped_group_frac": float(1 - keep.float().mean()),
    }


def forget_unlogged(trainer: L.Trainer, logged: dict[str, float]) -> None:
    """Leave out of this step's row the training-step metrics it does not log. Lightning sends an on-step
    metric's last value again at every later step of the epoch (an RL run is one epoch), so a step that
    dropped every group (the zero-variance filter) repeated the last update's ``rl/grad_norm``, loss,
    entropy and timings as its own. Lightning has no public way to drop a logged key: its result
    collection leaves out a metric marked reset, until it is logged again."""
    results = getattr(trainer, "_results", None)
    for key, item in (results or {}).items():
        if key.startswith("training_step.") and item.meta.name not in logged and not item.has_reset:
            item.reset()


def float_metrics(clip, metrics: dict) -> dict[str, float]:
    """A micro-step's objective metrics as floats (``num_tokens`` left out). The clip's own are not checked
    before the run when it is built without ``probe_clip``: a string or a [N] tensor among them was a
    ValueError from ``float`` in the first update; now a ``ComponentError`` naming the clip and the metric."""
    out = {}
    for key, value in metrics.items():
        if key == "num_tokens":
            continue
        if (problem := metric_problem(key, value)) is not None:
            raise component_error("clip", clip, problem)
        out[key] = float(value)
    return out
