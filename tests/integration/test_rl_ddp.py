"""RL under Lightning DDP on the CPU (gloo, 2 processes): one run whose ranks share every update.

Each rank generates for half of the step's prompts. The test's group filter keeps one group per rank
and the global minibatch is one group, so each update holds one rank's group while the other rank
joins with a zero gradient, and each real update is accumulated over two micro-batches of which only
the last all-reduces. A mismatched all-reduce would hang the run (timeout); a missed one would leave
the ranks with different weights, which the module's end-of-training fingerprint check turns into a
failed run (checked by disabling gradient sync: the run fails with "DDP ranks hold different policy
weights"). A second test compares a step of two updates on two ranks with the same step in one process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from klear_lab.cli import main
from klear_lab.config.compose import compose
from klear_lab.errors import ConfigError
from klear_lab.run import run_experiment
from klear_lab.stages.eval import eval_config

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = """
import zlib
from dataclasses import dataclass
import torch
from klear_lab.registry import CLIP, GROUP_FILTER, REWARD
from klear_lab.rewards.base import RewardOutput

@REWARD.register("test_ddp_digits")
@dataclass(frozen=True)
class Digits:
    \"\"\"Test reward with variance inside every group: the number of digits in the response.\"\"\"
    def __call__(self, completions, records):
        return [RewardOutput(score=float(sum(ch.isdigit() for ch in c)), acc=False, format_ok=True)
                for c in completions]

@REWARD.register("test_ddp_per_record")
@dataclass(frozen=True)
class PerRecord:
    \"\"\"Test verifier: passes about half of the (record, completion) pairs, so a completion from other
    weights, or scored against the wrong record, changes the numbers.\"\"\"
    def __call__(self, completions, records):
        return [RewardOutput(score=0.0, acc=zlib.crc32((c + r.uid).encode()) % 2 == 0, format_ok=True)
                for c, r in zip(completions, records)]

@REWARD.register("test_ddp_all_correct")
@dataclass(frozen=True)
class AllCorrect:
    \"\"\"Test reward: every response is correct (zero advantages; the alpha term alone trains).\"\"\"
    def __call__(self, completions, records):
        return [RewardOutput(score=1.0, acc=True, format_ok=True) for _ in completions]

@REWARD.register("test_ddp_fails_on_rank1")
@dataclass(frozen=True)
class FailsOnRank1:
    \"\"\"Test reward: rank 1 raises at the second step's scoring.\"\"\"
    def __call__(self, completions, records):
        import os
        calls = FailsOnRank1.calls = getattr(FailsOnRank1, "calls", 0) + 1
        if os.environ.get("LOCAL_RANK") == "1" and calls == 2:
            raise RuntimeError("verifier crashed on rank 1")
        return [RewardOutput(score=float(len(c)), acc=False, format_ok=True) for c in completions]

@REWARD.register("test_ddp_unbuildable_on_rank1")
@dataclass(frozen=True)
class UnbuildableOnRank1:
    \"\"\"Test reward: rank 1 cannot build it (an input only rank 0's machine has, a plugin edited in between).\"\"\"
    def __post_init__(self):
        import os
        from klear_lab.errors import ComponentError
        if os.environ.get("LOCAL_RANK") == "1":
            raise ComponentError("reward test_ddp_unbuildable_on_rank1: no verifier on rank 1")
    def __call__(self, completions, records):
        return [RewardOutput(score=float(len(c)), acc=False, format_ok=True) for c in completions]

@CLIP.register("test_ddp_fails_on_rank1")
@dataclass(frozen=True)
class PpoButOnRank1:
    \"\"\"Test clip: PPO's, but rank 1 raises (at the probe call that builds the run).\"\"\"
    def __call__(self, logp, old_logp, adv, mask):
        import os
        if os.environ.get("LOCAL_RANK") == "1":
            raise RuntimeError("no clip on rank 1")
        return CLIP.build({"name": "ppo"})(logp, old_logp, adv, mask)

@GROUP_FILTER.register("test_ddp_keep_first")
@dataclass(frozen=True)
class KeepFirst:
    \"\"\"Test filter: keeps the first group of each rank's batch.\"\"\"
    def __call__(self, scores, acc):
        keep = torch.zeros(scores.shape[0], dtype=torch.bool)
        keep[0] = True
        return keep
"""


@pytest.fixture(scope="module")
def plugin(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("plugins") / "ddp_rl_plugin.py"
    path.write_text(PLUGIN)
    return path


def overrides(out: Path, plugin: Path) -> list[str]:
    return [f"run.out_dir={out}", "model.init_from=null", "model.tiny.size=2m", f"plugins=[{plugin}]",
            "rl.reward=test_ddp_digits", "rl.group_filter=test_ddp_keep_first", "rl.steps=2",
            "rl.prompts_per_step=4", "rl.group_size=4", "rl.minibatch_prompts=1", "rl.micro_batch_seqs=2",
            "rl.max_new_tokens=16", "rl.eval_every=0", "rl.alpha=0.0", "optim.lr=0.05", "optim.warmup_steps=0",
            "data.sources.0.n_prompts=20", "data.eval_sources.0.n_prompts=12", "eval.max_new_tokens=8",
            "eval.reward=test_ddp_per_record", "trainer.checkpoint=false", "trainer.accelerator=cpu"]


def test_rl_on_two_cpu_processes_is_one_run_with_shared_updates(tmp_path, plugin, klear_cli):
    out = tmp_path / "runs"
    done = klear_cli("train", str(ROOT / "experiments/quickstart/rl.yaml"), *overrides(out, plugin),
                     "trainer.devices=2", "trainer.strategy=ddp", WANDB_MODE="offline")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stdout.count("run finished") == 1
    (run_dir,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["perf/world_size"] == 2 and summary["perf/torch_threads"] == 1
    assert summary["rl/kept_group_frac"] == 0.5  # 1 of each rank's 2 prompts
    assert summary["rl/updates_per_step"] == 2  # 2 kept groups over both ranks, 1 per update
    assert summary["train/steps"] == 4  # 2 rollout steps x 2 updates, the same on both ranks
    assert summary["val/n"] == 12 and 0 < summary["val/acc"] < 1
    assert len(list((run_dir / "wandb").glob("offline-run-*"))) == 1
    assert sum(1 for _ in (run_dir / "eval_samples.jsonl").open()) == 12

    cfg = eval_config(run_dir, [f"run.out_dir={tmp_path / 'eval'}", "tracking.wandb.enabled=false"])
    single = run_experiment(cfg)  # rank 0's saved weights on all 12 problems, one process
    assert single.metrics["val/acc"] == pytest.approx(summary["val/acc"])
    rows = [json.loads(line) for line in (run_dir / "eval_samples.jsonl").open()]
    again = [json.loads(line) for line in (single.run_dir / "eval_samples.jsonl").open()]
    assert [r["completions"] for r in rows] == [r["completions"] for r in again]  # rank 1 decoded the same


def test_a_rank_that_fails_is_named_as_the_cause_in_run_json(tmp_path, plugin, klear_cli):
    """Rank 0 only sees rank 1's connection drop; run.json says why rank 1 stopped."""
    out = tmp_path / "runs"
    done = klear_cli("train", str(ROOT / "experiments/quickstart/rl.yaml"), *overrides(out, plugin),
                     "rl.reward=test_ddp_fails_on_rank1", "trainer.devices=2", "trainer.strategy=ddp",
                     "tracking.wandb.enabled=false")
    assert done.returncode != 0
    (run_dir,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "failed"
    assert record["error"].startswith("rank 1: RuntimeError: verifier crashed on rank 1; rank 0: "), record["error"]


@pytest.mark.parametrize(("override", "reason"), [
    ("rl.reward=test_ddp_unbuildable_on_rank1",  # the CLI's config check builds the reward
     "klear_lab.errors.ConfigError: command line: rl.reward: reward 'test_ddp_unbuildable_on_rank1': "
     "reward test_ddp_unbuildable_on_rank1: no verifier on rank 1 (with its own defaults, "),
    ("rl.clip=test_ddp_fails_on_rank1",  # run_experiment's build probes the clip
     "klear_lab.errors.ComponentError: rl.clip: clip 'test_ddp_fails_on_rank1' (")])
def test_a_rank_that_cannot_build_the_run_is_named_as_the_cause(tmp_path, plugin, klear_cli, capsys, override,
                                                                 reason):
    """Rank 1 builds the run again. When that fails, rank 0 is still waiting for it to connect, and Lightning
    SIGKILLs rank 0 as rank 1 exits: the run read as stopped, with no reason anywhere but rank 1's output."""
    out = tmp_path / "runs"
    done = klear_cli("train", str(ROOT / "experiments/quickstart/rl.yaml"), *overrides(out, plugin), override,
                     "trainer.devices=2", "trainer.strategy=ddp", "tracking.wandb.enabled=false")
    assert done.returncode != 0
    (run_dir,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    reason = f"rank 1: {reason}"
    assert main(["runs", str(out), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["status"] in ("stopped", "failed") and row["note"].startswith(reason), row  # failed: rank 0 came first
    assert main(["eval", str(run_dir)]) == 2
    assert reason in capsys.readouterr().err


def test_a_script_whose_rank_cannot_build_the_run_names_the_cause(tmp_path, plugin, capsys):
    """The API under DDP: Lightning starts rank 1 by running the script again, and its run_experiment fails."""
    out, script = tmp_path / "runs", tmp_path / "train.py"
    args = [*overrides(out, plugin), "rl.clip=test_ddp_fails_on_rank1", "trainer.devices=2", "trainer.strategy=ddp",
            "tracking.wandb.enabled=false"]
    script.write_text("from klear_lab.config.compose import compose\nfrom klear_lab.run import run_experiment\n"
                      f"run_experiment(compose({str(ROOT / 'experiments/quickstart/rl.yaml')!r}, {args!r}))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "KLEAR_RUN_DIR")}
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**env, "HF_HUB_OFFLINE": "1"})
    assert done.returncode != 0
    assert main(["runs", str(out), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["status"] in ("stopped", "failed") and row["note"].startswith(
        "rank 1: klear_lab.errors.ComponentError: rl.clip: clip 'test_ddp_fails_on_rank1' ("), row
    assert "failed on a probe batch of [2, 3] tokens: RuntimeError: no clip on rank 1" in row["note"], row


def test_two_ranks_take_the_same_update_as_one_process(tmp_path, plugin, klear_cli):
    """Each prompt samples from its own seed (the run seed, the step and its place in the step's prompts),
    so both runs draw the same responses, and each of the step's 2 updates (2 of the 4 prompts each,
    x 2 responses) must have the same gradient whether one process or two ranks compute it: ranks
    normalise by global token counts and scale by world against DDP's mean (without the scaling the
    gradient norm halves: checked). One rollout step: a second would sample from weights that differ
    by float noise (below), where a token drawn at a CDF boundary could flip on some machine."""
    args = [*overrides(tmp_path / "runs", plugin), "rl.group_filter=none",
            "rl.alpha=1.0", "rl.steps=1", "rl.group_size=2", "rl.minibatch_prompts=2",
            "data.eval_sources.0.n_prompts=2", "tracking.wandb.enabled=false"]
    done = klear_cli("train", str(ROOT / "experiments/quickstart/rl.yaml"), *args, "run.name=two_ranks",
                     "trainer.devices=2", "trainer.strategy=ddp")
    assert done.returncode == 0, done.stderr[-3000:]
    (ddp_dir,) = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]
    ddp = json.loads((ddp_dir / "summary.json").read_text())
    one = run_experiment(compose(ROOT / "experiments/quickstart/rl.yaml", [*args, "run.name=one_process"]))
    assert ddp["perf/world_size"] == 2 and one.metrics["perf/world_size"] == 1
    assert ddp["rl/updates_per_step"] == one.metrics["rl/updates_per_step"] == 2
    assert ddp["rl/grad_norm"] > 0 and ddp["reward/std"] > 0
    for key in ("reward/mean", "reward/std", "rl/response_len_mean", "rl/response_len_max"):  # same rollouts
        assert ddp[key] == pytest.approx(one.metrics[key], rel=1e-6), key
    assert ddp["rl/grad_norm"] == pytest.approx(one.metrics["rl/grad_norm"], rel=1e-4)
    assert ddp["rl/positive_loss"] == pytest.approx(one.metrics["rl/positive_loss"], rel=1e-4)
    a = load_file(ddp_dir / "model" / "model.safetensors")
    b = load_file(one.run_dir / "model" / "model.safetensors")
    # Adam's first step moves each weight by about lr (0.05); coordinates whose gradient is near Adam's
    # eps differ by float noise in the sum order (measured: 3e-5)
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-4


@pytest.mark.parametrize(("override", "needle"), [
    ("trainer.strategy=fsdp", "trainer.strategy='fsdp': RL on several devices is data parallel"),
    ("trainer.strategy=ddp_spawn", "trainer.strategy='ddp_spawn'"),
    ("rl.rollout=vllm", "rl.rollout=vllm with trainer.devices=2"),
    ("rl.prompts_per_step=5", "rl.prompts_per_step=5 does not split evenly over trainer.devices=2"),
])
def test_multi_device_rl_that_cannot_work_is_refused_before_anything_is_written(tmp_path, plugin, capsys,
                                                                                 override, needle):
    args = [*overrides(tmp_path / "runs", plugin), "trainer.devices=2", "trainer.strategy=ddp", override]
    with pytest.raises(ConfigError, match="several devices|devices=2"):
        run_experiment(compose(ROOT / "experiments/quickstart/rl.yaml", args))
    assert main(["train", str(ROOT / "experiments/quickstart/rl.yaml"), *args]) == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_dry_run_says_how_the_ranks_split_a_step(tmp_path, plugin, capsys):
    args = [*overrides(tmp_path / "runs", plugin), "trainer.devices=2", "trainer.strategy=ddp"]
    assert main(["train", str(ROOT / "experiments/quickstart/rl.yaml"), *args, "--dry-run"]) == 0
    assert "2 (DDP: each rank generates 2 prompts x 4" in capsys.readouterr().out
    assert main(["train", str(ROOT / "experiments/quickstart/rl.yaml"), *args, "trainer.strategy=fsdp",
                 "--dry-run"]) == 2  # the plan, then the config error the run would stop with
    assert "NOT SUPPORTED: trainer.strategy='fsdp'" in capsys.readouterr().out


def test_an_rl_sweep_trial_on_two_cpu_processes_reports_once(tmp_path, plugin, klear_cli):
    """A 2-rank RL trial with a pruner: evaluations during training broadcast the pruning decision, so
    rank 1 must run the same callbacks; only rank 0 reports to Optuna."""
    spec = tmp_path / "ddp_rl.yaml"
    extra = [o for o in overrides(tmp_path / "unused", plugin) if not o.startswith("run.out_dir")]
    spec.write_text(f"""
experiment: {ROOT / 'experiments/quickstart/rl.yaml'}
overrides: {json.dumps([*extra, "rl.eval_every=1", "trainer.devices=2", "trainer.strategy=ddp",
                        "tracking.wandb.enabled=false"])}
axes: {{rl.clip: [gppo]}}
seeds: [0]
objective: {{metric: val/acc, direction: maximize}}
sampler: grid
pruner: median
workers: 1
out_dir: {tmp_path / 'out'}
""")
    done = klear_cli("sweep", str(spec))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "trials {'COMPLETE': 1}" in done.stdout
    (run_dir,) = [p for p in (tmp_path / "out" / "ddp_rl" / "runs").iterdir() if not p.name.startswith(".")]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["perf/world_size"] == 2 and summary["rl/updates_per_step"] == 2
    log = (tmp_path / "out" / "ddp_rl" / "trials" / "trial-0000.log").read_text()
    assert "GLOBAL_RANK: 1" in log and "Traceback" not in log
