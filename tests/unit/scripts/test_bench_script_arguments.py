"""A bad argument to a benchmark script is an argparse error (exit 2, the argument named) before any heavy import
or work: a fresh user's small or wrong counts crashed them with tracebacks, some after minutes of training."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPTS = REPO / "scripts"
HEAVY = ("torch", "lightning", "transformers", "optuna", "klear_lab.run")
# runs the script as `python scripts/bench_x.py ARGS` does, then says which heavy modules it had imported
RUNNER = f"""
import runpy, sys
script, *sys.argv[1:] = sys.argv[1:]
sys.argv[0] = script
sys.path.insert(0, sys.argv[0].rsplit("/", 1)[0])
try:
    runpy.run_path(script, run_name="__main__")
finally:
    print("heavy imports:", [m for m in {HEAVY!r} if m in sys.modules], file=sys.stderr)
"""

BAD = [  # (script, arguments, the argument the error names)
    ("bench_kcenter.py", ["--pool", "0"], "--pool"),
    ("bench_kcenter.py", ["--pool", "1000", "-5"], "--pool"),
    ("bench_kcenter.py", ["--picks", "0"], "--picks"),
    ("bench_kcenter.py", ["--dim", "0"], "--dim"),
    ("bench_kcenter.py", ["--words", "0"], "--words"),
    ("bench_kcenter.py", ["--threads", "0"], "--threads"),
    ("bench_logp_chunks.py", ["--repeats", "0"], "--repeats"),
    ("bench_logp_chunks.py", ["--vocab", "0"], "--vocab"),
    ("bench_logp_chunks.py", ["--vocab", "1"], "--vocab"),
    ("bench_logp_chunks.py", ["--seqs", "0"], "--seqs"),
    ("bench_logp_chunks.py", ["--threads", "0"], "--threads"),
    ("bench_logp_chunks.py", ["--tokens", "0"], "--tokens"),
    ("bench_logp_chunks.py", ["--prompt", "0"], "--prompt"),
    ("bench_logp_chunks.py", ["--hidden", "2"], "--hidden"),
    ("bench_logp_chunks.py", ["--chunks", "0", "-5"], "--chunks"),
    ("bench_checkpoint.py", ["--steps", "2", "--every", "5"], "--every"),
    ("bench_checkpoint.py", ["--steps", "4", "--every", "4"], "--every"),
    ("bench_checkpoint.py", ["--every", "0"], "--every"),
    ("bench_checkpoint.py", ["--steps", "1"], "--steps"),
    ("bench_code_reward.py", ["--candidates", "0"], "--candidates"),
    ("bench_code_reward.py", ["--tests", "0"], "--tests"),
    ("bench_code_reward.py", ["--workers", "0"], "--workers"),
    ("bench_sweep_workers.py", ["--arms", "0"], "--arms"),
    ("bench_sweep_workers.py", ["--repeats", "0"], "--repeats"),
    ("bench_sweep_workers.py", ["--steps", "-1"], "--steps"),
    ("bench_sweep_workers.py", ["--cores", "-1"], "--cores"),
    ("bench_sweep_workers.py", ["--cores", str(len(os.sched_getaffinity(0)) + 1)], "--cores"),
    ("bench_rl_ddp.py", ["--devices", "0"], "--devices"),
    ("bench_rl_ddp.py", ["--devices", "1"], "--devices"),
    ("bench_rl_ddp.py", ["--steps", "0"], "--steps"),
    ("bench_rl_ddp.py", ["--seed", "-1"], "--seed"),
    ("bench_precision.py", ["--rl-steps", "0"], "--rl-steps"),
    ("bench_precision.py", ["--sft-steps", "0"], "--sft-steps"),
    ("bench_precision.py", ["--precisions", "32-true,,bf16-mixed"], "--precisions"),
    ("bench_precision.py", ["--precisions", "32-true,bf16-mix"], "--precisions"),
    ("bench_precision.py", ["--size", "5m"], "--size"),
    ("bench_precision.py", ["--accelerator", "gpux"], "--accelerator"),
    ("bench_precision.py", ["--set", "sft.max_steps"], "--set"),
    ("bench_sampling.py", ["--rows", "0"], "--rows"),
    ("bench_sampling.py", ["--vocab", "100", "0"], "--vocab"),
    ("bench_sampling.py", ["--steps", "0"], "--steps"),
    ("bench_sampling.py", ["--threads", "0"], "--threads"),
    ("bench_eval_engine.py", ["--problems", "0"], "--problems"),
    ("bench_eval_engine.py", ["--samples", "0"], "--samples"),
    ("bench_eval_engine.py", ["--max-new-tokens", "0"], "--max-new-tokens"),
    ("bench_eval_engine.py", ["--batch-size", "0"], "--batch-size"),
    ("bench_eval_engine.py", ["--threads", "0"], "--threads"),
    ("bench_eval_engine.py", ["--heads", "-1"], "--heads"),
    ("bench_eval_engine.py", ["--kv-cache-gib", "0"], "--kv-cache-gib"),
]


def run_script(name: str, args: list[str], tmp_path: Path, via_runner: bool = True) -> subprocess.CompletedProcess:
    """The script in a fresh process from the repository root; its outputs (``--out``) and temporary files land
    under ``tmp_path`` should a refusal be missing."""
    prefix = ["-c", RUNNER] if via_runner else []
    env = {**os.environ, "TMPDIR": str(tmp_path), "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    return subprocess.run([sys.executable, *prefix, str(SCRIPTS / name), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env=env)


@pytest.mark.parametrize(("script", "args", "flag"), BAD, ids=[f"{s[6:-3]}:{' '.join(a)}" for s, a, _ in BAD])
def test_a_bad_argument_is_refused_before_any_work(script, args, flag, tmp_path):
    extra = ["--out", str(tmp_path / "out")] if script in ("bench_rl_ddp.py", "bench_precision.py") else []
    done = run_script(script, [*args, *extra], tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"error: argument {flag}" in done.stderr
    assert "Traceback" not in done.stderr
    assert "heavy imports: []" in done.stderr  # refused before torch, Lightning or a training started
    assert not (tmp_path / "out").exists()


def test_eval_engine_refuses_heads_the_model_size_cannot_split(tmp_path):
    done = run_script("bench_eval_engine.py", ["--heads", "5"], tmp_path, via_runner=False)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "error: argument --heads/--kv-heads:" in done.stderr and "num_heads 5" in done.stderr
    assert "Traceback" not in done.stderr


def test_kcenter_caps_picks_to_a_small_pool_and_marks_the_extrapolation(tmp_path):
    done = run_script("bench_kcenter.py", ["--pool", "30", "--picks", "50", "--words", "3", "--dim", "8"], tmp_path,
                      via_runner=False)
    assert done.returncode == 0, done.stderr[-2000:]
    line = done.stdout.splitlines()[-1]
    assert line.startswith("pool      30:")
    assert "31,600 picks ~" in line and "(extrapolated: more picks than the pool has)" in line
    assert "| " in line and " (30 picks: the pool's size, not --picks 50" in line.rsplit("| ", 1)[1]
