"""A run's checkpoint is written where it is asked for: Lightning's own writer staged the whole file in the
system's temp directory first, where a run killed mid-write left it for good."""

from __future__ import annotations

import tempfile
from pathlib import Path

import lightning as L
import torch

from klear_lab.checkpoint_io import RunDirCheckpointIO
from klear_lab.config.compose import compose
from klear_lab.stages.common import make_trainer

SFT = Path(__file__).resolve().parents[2] / "experiments/quickstart/sft.yaml"


class _Linear(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return self.layer(batch).pow(2).mean()  # batch: (2, 3)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_a_run_trainer_saves_without_the_system_temp_directory(tmp_path, monkeypatch):
    cfg = compose(SFT, ["trainer.accelerator=cpu", "trainer.devices=1"])
    trainer = make_trainer(cfg, tmp_path, [], max_steps=1, callbacks=[])
    assert isinstance(trainer.strategy.checkpoint_io, RunDirCheckpointIO)
    module = _Linear()
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader(torch.ones(4, 3), batch_size=2))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-temp-dir"))  # mkstemp there fails
    path = tmp_path / "checkpoints" / "pending.ckpt"
    trainer.save_checkpoint(path, weights_only=False)
    saved = torch.load(path, weights_only=False)
    assert saved["global_step"] == 1
    assert torch.equal(saved["state_dict"]["layer.weight"], module.layer.weight.detach())
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["pending.ckpt"]
