"""A SIGTERM during the final training step of a 2-rank DDP run lets the run finish, as in one process.

Training is done at the final step: stopping there would record a finished run as failed, without its final
evaluation and model. In one process ``test_resume_signals.py`` checks this with a callback; under DDP the ranks
must also agree on it (each only notes the signal; they agree at each step's end), whichever rank gets it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from klear_lab.resume import checkpoint_path

ROOT = Path(__file__).resolve().parents[2]
SFT = str(ROOT / "experiments/quickstart/sft.yaml")

SCRIPT = """
import os, signal, sys
import lightning as L
from klear_lab.config.compose import compose
from klear_lab.run import run_experiment

class SigtermInStep(L.Callback):
    \"\"\"SIGTERM to the process of rank ``rank`` at the start of the batch that takes optimizer step ``at`` + 1.\"\"\"
    def __init__(self, at, rank):
        self.at, self.rank, self.sent = at, rank, False
    def on_train_batch_start(self, trainer, *args):
        if trainer.global_step == self.at and trainer.global_rank == self.rank and not self.sent:
            self.sent = True
            os.kill(os.getpid(), signal.SIGTERM)

experiment, rank, *overrides = sys.argv[1:]
run_experiment(compose(experiment, overrides), callbacks=[SigtermInStep(7, int(rank))])
"""


@pytest.mark.parametrize("to_rank", [0, 1])
def test_a_sigterm_in_the_final_step_on_two_ranks_lets_the_run_finish(tmp_path, to_rank):
    out, script = tmp_path / "runs", tmp_path / "train.py"
    script.write_text(SCRIPT)
    args = [f"run.out_dir={out}", "data.sources.0.n_prompts=400", "sft.max_steps=8", "sft.tokens_per_micro_batch=400",
            "data.eval_sources.0.n_prompts=8", "eval.max_new_tokens=8", "trainer.checkpoint_every=4",
            "trainer.log_every_n_steps=1", "trainer.accelerator=cpu", "trainer.devices=2", "trainer.strategy=ddp",
            "tracking.wandb.enabled=false"]
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "KLEAR_RUN_DIR", "WANDB_SERVICE")}
    done = subprocess.run([sys.executable, str(script), SFT, str(to_rank), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**env, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    # said once, by rank 0, also when rank 1 got the signal (rank 0 learns it from the agreement)
    assert done.stderr.count("SIGTERM during the last training step") == 1, done.stderr[-3000:]
    (run_dir,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"
    assert (run_dir / "model" / "model.safetensors").is_file()
    assert json.loads((run_dir / "summary.json").read_text())["train/steps"] == 8
    assert torch.load(checkpoint_path(run_dir), weights_only=True)["global_step"] == 4  # none at the final step
