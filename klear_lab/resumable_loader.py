"""A DataLoader that resumes mid-epoch: the stopped run's order drawn again, the consumed batches skipped.

The loader whose position :class:`klear_lab.checkpointing.ResumeCheckpoint` saves and restores (the epoch and
its batches trained on): see :mod:`klear_lab.checkpointing`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader


class ResumableLoader(DataLoader):
    """A DataLoader whose first iteration can start mid-epoch, in the order the stopped run had.

    Its Lightning loader state (``state_dict``, saved in the checkpoint) is the shuffling generator's
    state at the start of the current epoch: restored, the epoch's order is drawn again exactly as
    before (whatever the sampler draws from it). ``skip()`` is asked once, at the first ``iter()``:
    ``(epoch, batches)`` of a resumed run; the first ``batches`` batches' indices are drawn and dropped
    without loading. ``len()`` stays the epoch's length: Lightning counts them as already fetched.
    ``skip`` is a keyword argument, so Lightning's re-instantiation under DDP keeps it, as is ``windows``:
    an accumulation window's size, whose batches then carry their step's loss-token count
    (:func:`klear_lab.data.sft.with_step_tokens`; 0: none).
    """

    def __init__(self, *args: Any, skip: Callable[[], tuple[int, int]] | None = None, windows: int = 0,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.skip, self.windows = skip, windows
        self._epoch_start: torch.Tensor | None = None  # generator state when the current epoch began
        self._restore: torch.Tensor | None = None

    def __iter__(self) -> Iterator:
        skip, self.skip = self.skip, None
        epoch, batches = skip() if skip is not None else (0, 0)
        if batches and hasattr(self.sampler, "set_epoch"):  # e.g. DDP's DistributedSampler: order by epoch
            self.sampler.set_epoch(epoch)
        if self.generator is not None:
            if self._restore is not None:
                self.generator.set_state(self._restore)
                self._restore = None
            self._epoch_start = self.generator.get_state()
        it = super().__iter__()
        for _ in range(batches):
            it._next_index()  # the sampler's next batch of indices, not loaded
        if self.windows:
            from klear_lab.data.sft import with_step_tokens

            return with_step_tokens(it, self.windows, batches, len(self))
        return it

    def state_dict(self) -> dict[str, Any]:
        return {} if self._epoch_start is None else {"generator": self._epoch_start}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._restore = state.get("generator")
