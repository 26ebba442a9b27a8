"""A SIGTERM outside training steps: in an evaluation ``trainer.validate`` runs, and after training.

- In the final evaluation of a 2-rank DDP run, Lightning's handler broadcast from inside the signal handler:
  a SIGTERM that reached rank 1 there hung both ranks for good (it even ignored ``timeout``'s SIGTERM).
  Training is done, so the run finishes and exits 0, whichever rank got it.
- In RL's starting-point evaluation (before any step) the run stops at the evaluation's end, on every rank
  (143, recorded as terminated, nothing trained). It was lost before: fit reset Lightning's flag, and the
  run trained to the end (one process), or hung (DDP, rank 1).
- Between the end of fit and the run's end (the model's save) the signal is held back: it killed the
  process there (the handler before fit is back), with no model and a run read as running. Once the run is
  recorded, the caller learns of it; a parent trained inside an RL command stops that command.

The signal comes from a test reward (a plugin) at its first call on the chosen rank: in SFT that is the
final evaluation, in RL the starting point's.
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
SFT, RL = str(ROOT / "experiments/quickstart/sft.yaml"), str(ROOT / "experiments/quickstart/rl.yaml")
PLUGIN = """
import os, signal
from dataclasses import dataclass
from klear_lab.registry import REWARD
from klear_lab.rewards.base import RewardOutput

@REWARD.register("test_sigterm_first_call")
@dataclass(frozen=True)
class SigtermAtFirstCall:
    \"\"\"Test verifier: SIGTERM to its own process at its first call on rank KLEAR_TEST_SIGTERM_RANK.\"\"\"
    def __call__(self, completions, records):
        if (os.environ.get("LOCAL_RANK", "0") == os.environ["KLEAR_TEST_SIGTERM_RANK"]
                and not getattr(SigtermAtFirstCall, "sent", False)):
            SigtermAtFirstCall.sent = True
            os.kill(os.getpid(), signal.SIGTERM)
        return [RewardOutput(score=0.0, acc=len(c) % 2 == 0, format_ok=True) for c in completions]
"""
TINY_SFT = ["data.sources.0.n_prompts=200", "sft.max_steps=4", "sft.tokens_per_micro_batch=400",
            "trainer.checkpoint_every=2"]
TINY_RL = ["model.init_from=null", "model.tiny.size=2m", "rl.steps=4", "rl.prompts_per_step=4", "rl.group_size=4",
           "rl.minibatch_prompts=2", "rl.max_new_tokens=8", "rl.eval_every=0", "data.sources.0.n_prompts=20",
           "data.eval_sources.0.n_prompts=8", "eval.max_new_tokens=8", "trainer.checkpoint_every=1"]
DDP = ["trainer.accelerator=cpu", "trainer.devices=2", "trainer.strategy=ddp", "tracking.wandb.enabled=false",
       "eval.reward=test_sigterm_first_call", "data.eval_sources.0.n_prompts=8", "eval.max_new_tokens=8"]


@pytest.fixture(scope="module")
def plugin(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("plugins") / "sigterm_plugin.py"
    path.write_text(PLUGIN)
    return path


def klear(args: list[str], rank: int) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "KLEAR_RUN_DIR", "WANDB_SERVICE")}
    # SIGKILL at the limit: a hung run ignored timeout's SIGTERM
    return subprocess.run(["timeout", "-s", "KILL", "240", sys.executable, "-m", "klear_lab.cli", *args], cwd=ROOT,
                          capture_output=True, text=True,
                          env={**env, "HF_HUB_OFFLINE": "1", "KLEAR_TEST_SIGTERM_RANK": str(rank)})


@pytest.mark.parametrize("rank", [0, 1])
def test_a_sigterm_in_the_final_evaluation_of_two_ranks_lets_the_run_finish(tmp_path, plugin, rank):
    out = tmp_path / "runs"
    done = klear(["train", SFT, f"run.out_dir={out}", f"plugins=[{plugin}]", *TINY_SFT, *DDP], rank)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.count("SIGTERM during the final evaluation") == 1, done.stderr[-3000:]  # rank 0, once
    (run_dir,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"
    assert (run_dir / "model" / "model.safetensors").is_file()
    assert json.loads((run_dir / "summary.json").read_text())["val/n"] == 8  # both ranks' halves


@pytest.mark.parametrize(("devices", "rank"), [(1, 0), (2, 0), (2, 1)])
def test_a_sigterm_in_the_starting_evaluation_stops_before_training(tmp_path, plugin, devices, rank):
    """One process too: Lightning's flag was reset by fit, and the run trained on to the end (exit 0)."""
    out = tmp_path / "runs"
    done = klear(["train", RL, f"run.out_dir={out}", f"plugins=[{plugin}]", *TINY_RL, *DDP,
                  f"trainer.devices={devices}", f"trainer.strategy={'ddp' if devices > 1 else 'auto'}"], rank)
    assert done.returncode == 143, done.stderr[-3000:]
    assert done.stderr.count("klear-lab: terminated (SIGTERM)") == 1, done.stderr[-3000:]
    (run_dir,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "failed" and "terminated (SIGTERM)" in record["error"], record
    assert not (run_dir / "checkpoints" / "last.ckpt").exists()  # no step was trained
    assert not (run_dir / "model").exists()


LATE = """
import signal, sys
from klear_lab import sigterm
from klear_lab.config.compose import compose
from klear_lab.run import run_experiment

agree = sigterm.SigtermOutsideSteps.on_validation_end

def then_sigterm(self, trainer, pl_module):  # the signal right after the starting evaluation's agreement
    agree(self, trainer, pl_module)
    if not self._fitted:
        signal.raise_signal(signal.SIGTERM)

sigterm.SigtermOutsideSteps.on_validation_end = then_sigterm
experiment, *overrides = sys.argv[1:]
try:
    run_experiment(compose(experiment, overrides))
except SystemExit as exc:
    print("stopped:", type(exc).__name__)
"""


def test_a_sigterm_after_the_starting_evaluation_agreed_stops_at_the_first_step(tmp_path):
    """Between the agreement and Lightning's teardown of the evaluation (at scale: moving the models off the
    GPU) the signal is only noted: it was lost, and the run trained to the end."""
    out, script = tmp_path / "runs", tmp_path / "train.py"
    script.write_text(LATE)
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "KLEAR_RUN_DIR", "WANDB_SERVICE")}
    done = subprocess.run([sys.executable, str(script), RL, f"run.out_dir={out}", *TINY_RL,
                           "tracking.wandb.enabled=false"], cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env={**env, "HF_HUB_OFFLINE": "1"})
    assert "stopped: SIGTERMException" in done.stdout, done.stderr[-3000:]
    (run_dir,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    assert json.loads((run_dir / "run.json").read_text())["error"] == "terminated (SIGTERM)"
    assert torch.load(checkpoint_path(run_dir), weights_only=True)["klear_resume"]["batches"] == 1  # of 4 steps
    assert not (run_dir / "model").exists()


HELD = """
import signal, sys
import lightning as L
from klear_lab.config.compose import compose
from klear_lab.run import run_experiment

class SigtermAfterFit(L.Callback):
    \"\"\"SIGTERM at the fit's teardown hook: after training, before the stage saves the model.\"\"\"
    def teardown(self, trainer, pl_module, stage):
        if stage == "fit":
            signal.raise_signal(signal.SIGTERM)

own, experiment, *overrides = sys.argv[1:]
got = []
if own == "own":  # the caller's own handler: it is handed the signal once the run is recorded
    signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
before = signal.getsignal(signal.SIGTERM)
result = run_experiment(compose(experiment, overrides), callbacks=[SigtermAfterFit()])
print("held:", result.sigterm_held, "handed on:", len(got), "handler back:", signal.getsignal(signal.SIGTERM) == before)
"""


@pytest.mark.parametrize("own", ["default", "own"])
def test_a_sigterm_after_training_waits_for_the_saved_model_and_the_completed_run(tmp_path, own):
    """Before, the signal killed the process (-15) with the handler from before fit, before the model was
    saved. Now the run completes; the caller learns of the signal (``sigterm_held``; its own handler is
    handed it), and the handler from before the run is back."""
    out, script = tmp_path / "runs", tmp_path / "train.py"
    script.write_text(HELD)
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "KLEAR_RUN_DIR", "WANDB_SERVICE")}
    done = subprocess.run([sys.executable, str(script), own, SFT, f"run.out_dir={out}", *TINY_SFT,
                           "data.eval_sources.0.n_prompts=8", "eval.max_new_tokens=8", "tracking.wandb.enabled=false"],
                          cwd=ROOT, capture_output=True, text=True, timeout=240, env={**env, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "SIGTERM after training: the run saved its model" in done.stderr, done.stderr[-3000:]
    assert f"held: True handed on: {int(own == 'own')} handler back: True" in done.stdout, done.stdout[-2000:]
    (run_dir,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"
    assert (run_dir / "model" / "model.safetensors").is_file() and (run_dir / "summary.json").is_file()


PARENT = """
run: {{name: sigterm-parent, kind: sft, seed: 0}}
model: {{tiny: {{name: qwen2, size: 2m}}}}
plugins: [{plugin}]
data:
  sources: [{{name: arith_r1, n_prompts: 200, levels: [1], level_weights: [1.0]}}]
  eval_sources: [{{name: arith, levels: [1], level_weights: [1.0], n_prompts: 8}}]
  max_length: 100
sft: {{max_steps: 4, tokens_per_micro_batch: 400}}
eval: {{max_new_tokens: 8, reward: {{name: test_sigterm_first_call}}}}
trainer: {{checkpoint_every: 2}}
tracking: {{wandb: {{enabled: false}}}}
"""


def test_a_sigterm_in_the_final_evaluation_of_a_parent_trained_first_stops_the_command_after_it(tmp_path, plugin):
    """``model.init_from`` trains its parent inside the RL command: the parent completes (a requeued command
    reuses it), then the command stops (143) before the RL run starts. Before, it trained the RL run on."""
    out, parent = tmp_path / "runs", tmp_path / "parent.yaml"
    parent.write_text(PARENT.format(plugin=plugin))
    done = klear(["train", RL, f"run.out_dir={out}", f"model.init_from={parent}", "rl.steps=2",
                  "rl.prompts_per_step=4", "rl.group_size=4", "rl.max_new_tokens=8", "data.sources.0.n_prompts=20",
                  "data.eval_sources.0.n_prompts=8", "eval.max_new_tokens=8", "tracking.wandb.enabled=false"], 0)
    assert done.returncode == 143, done.stderr[-3000:]
    assert "SIGTERM during the final evaluation" in done.stderr and "klear-lab: terminated (SIGTERM)" in done.stderr
    (run_dir,) = list(out.iterdir())  # the parent only: the lock file of its training went with the lock
    assert run_dir.name.startswith("sigterm-parent")
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"
