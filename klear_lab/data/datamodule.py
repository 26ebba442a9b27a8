"""SFT DataModule: packed rows of tokenized examples, reshuffled each epoch with the run's seed."""

from __future__ import annotations

import random

import lightning as L
from torch.utils.data import DataLoader, Dataset

from klear_lab.data.sft import Example, collate_rows, packed_rows, packing_efficiency
from klear_lab.resumable_loader import ResumableLoader


class _Rows(Dataset):
    def __init__(self, rows: list[list[Example]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> list[Example]:
        return self.rows[i]


class SFTDataModule(L.LightningDataModule):
    """Examples are packed once (best-fit decreasing) into rows of ``capacity`` tokens; ``step_windows``
    > 0: each batch also carries the loss-token count of its accumulation window of that many batches."""

    def __init__(self, examples: list[Example], *, capacity: int, rows_per_batch: int, pack: bool,
                 pad_id: int, seed: int, step_windows: int = 0) -> None:
        super().__init__()
        self.rows = packed_rows(examples, capacity, pack)
        random.Random(seed).shuffle(self.rows)  # BFD emits longest-first; mix before batching
        self.capacity, self.rows_per_batch, self.pad_id, self.seed = capacity, rows_per_batch, pad_id, seed
        self.efficiency = packing_efficiency(self.rows, capacity) if pack else float("nan")
        self.step_windows = step_windows
        self.skip = None  # a resumed run's (epochs, batches) to fast-forward: ResumeCheckpoint.skip

    def batches_per_epoch(self) -> int:
        return -(-len(self.rows) // self.rows_per_batch)

    def train_dataloader(self) -> DataLoader:
        import torch

        gen = torch.Generator().manual_seed(self.seed)
        return ResumableLoader(_Rows(self.rows), batch_size=self.rows_per_batch, shuffle=True, generator=gen,
                               collate_fn=lambda rows: collate_rows(rows, self.pad_id), num_workers=0,
                               skip=self.skip, windows=self.step_windows)

    def val_dataloader(self) -> DataLoader:
        # one placeholder batch: the module evaluates its held-out records in on_validation_epoch_end
        return DataLoader([0], batch_size=1)
