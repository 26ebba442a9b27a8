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


MANY_EPOCHS = 10  # more passes than this over one data set: probably a mistake (the paper's SFT recipe trains 4)


def many_epochs_problem(max_steps: int, passes: float, rows: str, bound: str = "") -> str | None:
    """What an ``sft.max_steps`` run that passes over its ``rows`` (training rows, in words) ``passes`` times
    does, when that is more than :data:`MANY_EPOCHS`; None otherwise (an ``sft.epochs`` run asked for its
    epochs). ``bound``: "at least " where ``passes`` is a lower bound (the dry run's)."""
    if max_steps <= 0 or passes <= MANY_EPOCHS:
        return None
    return (f"sft.max_steps={max_steps} passes {bound}{passes:.3g} times over {rows}: more than {MANY_EPOCHS} "
            "epochs of the same data is probably a mistake (the paper's SFT recipe trains 4 epochs); lower "
            "sft.max_steps, or set sft.max_steps=0 and train by sft.epochs")


def many_epochs_rows(cfg: dict, examples: int | None) -> list[tuple[str, str]]:
    """The dry run's warning row of :func:`many_epochs_problem` for ``examples`` declared training examples
    (None: not declared, no row). A packed row holds at least one example, so one per row gives the most steps
    per epoch and the fewest epochs: the run's own are at least these."""
    from klear_lab.distributed import device_count

    s = cfg["sft"]
    if s["max_steps"] <= 0 or not examples:
        return []
    per_epoch, _ = planned_sft_steps(examples, rows_per_micro_batch(cfg), s["grad_accum"],
                                     device_count(cfg["trainer"]), 1, 0)
    rows = f"the {examples:,} declared training examples (at one per packed row; more if rows hold several)"
    problem = many_epochs_problem(s["max_steps"], s["max_steps"] / per_epoch, rows, bound="at least ")
    return [("warning", problem)] if problem else []
