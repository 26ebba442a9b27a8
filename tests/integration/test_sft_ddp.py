"""SFT under Lightning DDP on the CPU (gloo, 2 processes): one run, evaluation sharded over the ranks.

Lightning starts rank 1 by running the command again; it must join rank 0's run (one run directory,
one W&B run, one summary) and rank 0 alone writes files. The held-out problems are split between the
ranks and gathered back in order, so the numbers equal a single-process ``klear-lab eval`` of the
saved model (greedy decoding, a verifier that depends on the record and the completion).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from klear_lab.run import run_experiment
from klear_lab.stages.eval import eval_config

ROOT = Path(__file__).resolve().parents[2]
PER_RECORD = """
import zlib
from dataclasses import dataclass
from klear_lab.registry import REWARD
from klear_lab.rewards.base import RewardOutput

@REWARD.register("test_per_record_ddp")
@dataclass(frozen=True)
class PerRecord:
    \"\"\"Test verifier: passes about half of the (record, completion) pairs, so a completion scored
    against the wrong record would change the numbers.\"\"\"
    def __call__(self, completions, records):
        return [RewardOutput(score=0.0, acc=zlib.crc32((c + r.uid).encode()) % 2 == 0, format_ok=True)
                for c, r in zip(completions, records)]
"""


def test_sft_on_two_cpu_processes_is_one_run(tmp_path, klear_cli):
    plugin = tmp_path / "per_record.py"
    plugin.write_text(PER_RECORD)
    out = tmp_path / "runs"
    done = klear_cli("train", str(ROOT / "experiments/quickstart/sft.yaml"),
           f"run.out_dir={out}", "data.sources.0.n_prompts=120", "sft.max_steps=3", "data.eval_sources.0.n_prompts=15",
           "eval.max_new_tokens=24", "trainer.checkpoint=false", "sft.tokens_per_micro_batch=1000",
           f"plugins=[{plugin}]", "eval.reward=test_per_record_ddp",
           "trainer.accelerator=cpu", "trainer.devices=2", "trainer.strategy=ddp", WANDB_MODE="offline")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stdout.count("run finished") == 1  # rank 1 reports nothing
    (run_dir,) = [p for p in out.iterdir() if not p.name.startswith(".")]  # rank 1 joined rank 0's run
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["perf/world_size"] == 2 and summary["perf/torch_threads"] == 1  # 2 cores / 2 processes
    assert summary["val/n"] == 15 and 0 < summary["val/acc"] < 1
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    rows = saved["sft"]["tokens_per_micro_batch"] // saved["data"]["max_length"]
    assert summary["plan/tokens_per_step"] == 2 * rows * saved["data"]["max_length"]  # both ranks' batches
    assert len(list((run_dir / "wandb").glob("offline-run-*"))) == 1
    assert (run_dir / "model" / "config.json").is_file()

    cfg = eval_config(run_dir, [f"run.out_dir={tmp_path / 'eval'}", "tracking.wandb.enabled=false"])
    assert cfg["trainer"]["devices"] == 1  # an eval run is one process
    single = run_experiment(cfg)
    assert single.metrics["val/acc"] == pytest.approx(summary["val/acc"])


def test_a_sweep_trial_on_two_cpu_processes_reports_once(tmp_path, klear_cli):
    """A multi-device trial starts fresh; its rank 1 trains (with the pruning callback, whose broadcasts
    pair with rank 0's) but leaves Optuna to rank 0."""
    spec = tmp_path / "ddp.yaml"
    spec.write_text(f"""
experiment: {ROOT / 'experiments/quickstart/sft.yaml'}
overrides: [data.sources.0.n_prompts=120, sft.max_steps=3, data.eval_sources.0.n_prompts=8, eval.max_new_tokens=24,
            trainer.checkpoint=false, sft.tokens_per_micro_batch=1000, trainer.accelerator=cpu, trainer.devices=2,
            trainer.strategy=ddp, tracking.wandb.enabled=false, eval.every_n_steps=1]
axes: {{optim.lr: [0.001]}}
seeds: [0]
objective: {{metric: val/acc, direction: maximize}}
sampler: grid
pruner: median                 # its callback broadcasts after every evaluation: rank 1 must take part
workers: 1
out_dir: {tmp_path / 'out'}
""")
    done = klear_cli("sweep", str(spec))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "trials {'COMPLETE': 1}" in done.stdout
    (run_dir,) = [p for p in (tmp_path / "out" / "ddp" / "runs").iterdir() if not p.name.startswith(".")]
    assert json.loads((run_dir / "summary.json").read_text())["perf/world_size"] == 2
    log = (tmp_path / "out" / "ddp" / "trials" / "trial-0000.log").read_text()
    assert "GLOBAL_RANK: 1" in log and "Traceback" not in log


def test_step_token_mean_on_two_ranks_is_the_one_process_step(tmp_path, klear_cli):
    """sft.loss=step-token-mean divides by the step's loss tokens summed over the ranks: two ranks of 5 rows
    train the weights one process of 10 rows does. 10 prompts of about 100 tokens fill exactly those 10
    rows, so each of the 2 steps holds all of them, whatever order either sampler draws."""
    from safetensors.torch import load_file

    common = ["sft.loss=step-token-mean", "data.sources.0.n_prompts=10", "sft.max_steps=2", "sft.epochs=2",
              "data.eval_sources=[]", "trainer.checkpoint=false", "tracking.wandb.enabled=false",
              "trainer.log_every_n_steps=1"]
    done = klear_cli("train", str(ROOT / "experiments/quickstart/sft.yaml"), f"run.out_dir={tmp_path / 'ddp'}",
                     *common, "sft.tokens_per_micro_batch=500", "trainer.accelerator=cpu", "trainer.devices=2",
                     "trainer.strategy=ddp")
    assert done.returncode == 0, done.stderr[-3000:]
    from klear_lab.config.compose import compose

    single = run_experiment(compose(ROOT / "experiments/quickstart/sft.yaml",
                                    [f"run.out_dir={tmp_path / 'one'}", *common, "sft.tokens_per_micro_batch=1000"]))
    (ddp_dir,) = [p for p in (tmp_path / "ddp").iterdir() if not p.name.startswith(".")]
    assert json.loads((ddp_dir / "summary.json").read_text())["plan/steps_per_epoch"] == 1
    a, b = (load_file(str(d / "model" / "model.safetensors")) for d in (ddp_dir, single.run_dir))
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-5
    norms = [[float(r["train/grad_norm"]) for r in csv.DictReader((d / "csv" / "metrics.csv").open())
              if r.get("train/grad_norm")] for d in (ddp_dir, single.run_dir)]
    assert len(norms[1]) == 2 and norms[0] == pytest.approx(norms[1], rel=1e-4), norms  # the scale, too
