"""The full RL loss of one micro-batch: clipped policy term + SFT on positives + entropy + KL.

``loss = agg(clip(...).loss) + alpha * agg_pos(-logp) - entropy_coef * agg(H) + kl_coef * agg(KL)``

Every term uses the same aggregation mode with WHOLE-optimizer-batch counts (``ctx``, and
``pos_ctx`` for the positives), so summing the micro-batch losses (gradient accumulation without
any further division) reproduces the full-batch loss and gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from klear_lab.errors import component_error
from klear_lab.rl.aggregation.base import divide
from klear_lab.rl.clip.base import ClipOutput
from klear_lab.rl.kl import KL_ESTIMATORS, VERL_ALIASES, kl_estimate
from klear_lab.rl.types import AggContext, Aggregator, ClipObjective, PolicyBatch


@dataclass(frozen=True)
class ObjectiveWeights:
    """Coefficients of the extra terms; defaults are Klear-Reasoner's final RL recipe.

    Attributes:
        alpha: Weight of the SFT-on-positives NLL (paper arXiv 2508.07629, Eq. 13-14: 0.1).
        entropy_coef: Entropy bonus coefficient (Klear code ``entropy_coeff=0``).
        kl_coef: KL-to-reference coefficient (Klear uses no KL: 0).
        kl_estimator: ``k1``/``k2``/``k3`` (or verl ``kl``/``mse``/``low_var_kl``).
    """

    alpha: float = 0.1
    entropy_coef: float = 0.0
    kl_coef: float = 0.0
    kl_estimator: str = "k3"

    def __post_init__(self) -> None:
        if self.alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {self.alpha}")
        if self.kl_coef < 0:
            raise ValueError(f"kl_coef must be >= 0, got {self.kl_coef}")
        names = sorted(KL_ESTIMATORS | VERL_ALIASES)
        if self.kl_estimator not in names:
            raise ValueError(f"kl_estimator must be one of {names}, got {self.kl_estimator!r}")


def rl_objective(
    clip: ClipObjective,
    aggregation: Aggregator,
    batch: PolicyBatch,
    ctx: AggContext,
    weights: ObjectiveWeights | None = None,
    pos_ctx: AggContext | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss of one micro-batch and its metrics.

    Args:
        clip: A ``CLIP`` component.
        aggregation: An ``AGGREGATION`` component.
        batch: Micro-batch tensors (``logp``/``old_logp``/``mask`` [N, T], ``adv`` [N], optional
            ``positive`` [N] bool, ``ref_logp`` [N, T], ``entropy`` [N, T]).
        ctx: Counts of the whole optimizer batch (``AggContext.from_mask(full_mask)``).
        weights: Term coefficients; ``None`` means ``ObjectiveWeights()`` (alpha 0.1).
        pos_ctx: Counts of the positives of the whole optimizer batch
            (``AggContext.from_mask(full_mask * full_positive[:, None])``); needed with ``positive``.

    Returns:
        ``(loss, metrics)``: scalar loss to minimise (sum it over micro-batches, no extra division)
        and detached 0-d tensors. ``loss``, ``pg_loss``, ``positive_loss``, ``entropy``, ``kl`` are this
        micro-batch's CONTRIBUTIONS (sum over micro-batches); ``positive_loss``/``entropy``/``kl`` are logged as
        per-token means (of the positives' tokens for the first) whatever ``aggregation`` the loss uses, so
        their curves compare across aggregation arms; the clip metrics (``clipfrac*``,
        ``ratio_*``, ``approx_kl``) are micro-batch means, to be averaged weighted by ``num_tokens``.
        ``positive_loss``/``entropy``/``kl`` appear only when their input is given.

    Raises:
        ValueError: A non-zero coefficient whose input tensor (or ``pos_ctx``) is missing.
    """
    w = weights if weights is not None else ObjectiveWeights()
    out = clip(batch.logp, batch.old_logp, batch.adv, batch.mask)
    if not isinstance(out, ClipOutput):  # a plugin's mistake, named before an AttributeError deep in here
        raise component_error("clip", clip, f"returned {type(out).__name__}; a clip variant returns "
                              "ClipOutput(loss, metrics) (klear_lab/rl/clip/base.py)")
    pg = aggregation(out.loss, batch.mask, ctx)
    metrics = {**out.metrics, "pg_loss": pg.detach(), "num_tokens": batch.mask.sum().detach()}
    loss = pg
    for name, coef, term, per_token in _extra_terms(aggregation, batch, ctx, w, pos_ctx):
        metrics[name] = per_token.detach()
        if coef != 0.0:
            loss = loss + coef * term
    metrics["loss"] = loss.detach()
    return loss, metrics


def _extra_terms(
    aggregation: Aggregator,
    batch: PolicyBatch,
    ctx: AggContext,
    w: ObjectiveWeights,
    pos_ctx: AggContext | None,
) -> list[tuple[str, float, Tensor, Tensor]]:
    """(metric name, signed coefficient, aggregated term, its per-token mean) for each extra term whose input is
    given: the loss takes the term as ``aggregation`` weighs it, the log its token mean."""
    _require(batch.positive is not None or w.alpha == 0, "alpha > 0 needs batch.positive")
    _require(batch.entropy is not None or w.entropy_coef == 0, "entropy_coef != 0 needs batch.entropy")
    _require(batch.ref_logp is not None or w.kl_coef == 0, "kl_coef > 0 needs batch.ref_logp")
    terms = []
    if batch.positive is not None:
        _require(pos_ctx is not None, "batch.positive needs pos_ctx (counts of the batch's positives)")
        # Eq. 13-14: NLL of current-policy log-probs over fully-correct responses only
        pos_mask = batch.mask * batch.positive.to(batch.mask.dtype).unsqueeze(-1)  # [N, T]
        terms.append(("positive_loss", w.alpha, *_both(aggregation, -batch.logp, pos_mask, pos_ctx)))
    if batch.entropy is not None:
        terms.append(("entropy", -w.entropy_coef, *_both(aggregation, batch.entropy, batch.mask, ctx)))
    if batch.ref_logp is not None:
        kl = kl_estimate(w.kl_estimator, batch.logp, batch.ref_logp)  # [N, T]
        terms.append(("kl", w.kl_coef, *_both(aggregation, kl, batch.mask, ctx)))
    return terms


def _both(aggregation: Aggregator, values: Tensor, mask: Tensor, ctx: AggContext) -> tuple[Tensor, Tensor]:
    """``values`` [N, T] under ``aggregation`` (the loss's) and as a token mean over the optimizer batch (the log's):
    ``seq-mean-token-sum`` logged an entropy the length of a response times the token mean."""
    return aggregation(values, mask, ctx), divide((values.detach() * mask).sum(), ctx.num_tokens)


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)
