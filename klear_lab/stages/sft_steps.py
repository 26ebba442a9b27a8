"""The optimizer steps an SFT run plans for its packed rows, counted alike by the run (``stages.sft.sft_plan``)
and by its dry run (``dry_run_data``, which counts rows it has not packed). Imports nothing heavy."""

from __future__ import annotations

import math


def planned_sft_steps(rows: int, rows_per_batch: int, grad_accum: int, devices: int, epochs: float,
                      max_steps: int) -> tuple[int, int]:
    """(steps per epoch, total steps) for ``rows`` packed rows.

    Under DDP each of the ``devices`` ranks sees 1/devices of the rows per epoch (Lightning's
    DistributedSampler, padded to equal shares), so an epoch has 1/devices the optimizer steps. Lightning steps
    the optimizer on an epoch's last batch even when its accumulation window is short, so an epoch has
    ceil(batches / grad_accum) steps (rounding down left the last batches of each epoch untrained and made
    ``sft.epochs`` fewer epochs); a fraction of an epoch that starts a step trains it. ``max_steps`` > 0 wins.
    """
    rank_batches = math.ceil(math.ceil(rows / devices) / rows_per_batch)
    per_epoch = max(math.ceil(rank_batches / grad_accum), 1)
    return per_epoch, max_steps if max_steps > 0 else math.ceil(epochs * per_epoch)


def rows_per_micro_batch(cfg: dict) -> int:
    """Packed rows of ``data.max_length`` per micro-batch: ``sft.tokens_per_micro_batch // max_length``, at least 1."""
    return max(cfg["sft"]["tokens_per_micro_batch"] // cfg["data"]["max_length"], 1)
