"""How the loss and clip metrics of one step's micro-batches and updates add up to the logged values.

A micro-batch's loss terms are already normalised by the whole minibatch's counts, so they add up to
the update's value. Its clip statistics are means over its own tokens: weighted by its share of the
minibatch's tokens, they too add up to the update's. A sequence-level variant's (GSPO) clip fractions
and ratio mean are means over its sequences instead, so they are weighted by its share of the
minibatch's sequences (``approx_kl`` stays per token). Extremes (``*_max``, ``*_min``) are neither:
they take the maximum (minimum) over micro-batches, updates and, under DDP, ranks
(:func:`klear_lab.rl.data_parallel.merge_rank_metrics`). Logged: the mean over the step's updates,
the extremes over all of them.
"""

from __future__ import annotations

from collections.abc import Mapping

LOSS_TERMS = ("loss", "pg_loss", "positive_loss", "entropy", "kl")
TOKEN_MEANS = ("approx_kl",)  # per token even for a sequence-level clip variant


def is_extreme(key: str) -> bool:
    return key.endswith(("_max", "_min"))


def weight_micro_metrics(metrics: Mapping[str, float], share: float,
                         seq_share: float | None = None) -> dict[str, float]:
    """One micro-batch's metrics, ready to add up: clip means times ``share`` (its part of the
    minibatch's tokens), or times ``seq_share`` (its part of the minibatch's sequences) when given, for
    a sequence-level clip variant; loss terms and extremes as they are, but no extremes from a
    micro-batch without tokens (its ratio statistics are a placeholder 1.0)."""
    def weight(key: str) -> float:
        return share if seq_share is None or key in TOKEN_MEANS else seq_share

    return {k: v if k in LOSS_TERMS or is_extreme(k) else v * weight(k) for k, v in metrics.items()
            if share > 0 or not is_extreme(k)}


def accumulate(totals: dict[str, float], metrics: Mapping[str, float]) -> None:
    """Add one micro-batch's (weighted) metrics to the step's ``totals``, in place."""
    for k, v in metrics.items():
        if k not in totals:
            totals[k] = v
        elif k.endswith("_max"):
            totals[k] = max(totals[k], v)
        elif k.endswith("_min"):
            totals[k] = min(totals[k], v)
        else:
            totals[k] += v


def step_values(totals: Mapping[str, float], updates: int) -> dict[str, float]:
    """The logged values: sums as means over the step's ``updates``, extremes as they are."""
    return {k: v if is_extreme(k) else v / max(updates, 1) for k, v in totals.items()}
