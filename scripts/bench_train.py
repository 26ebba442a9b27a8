"""``klear-lab train`` in a process of its own, for the benchmark scripts: the run's ``summary.json``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def train_summary(experiment: str, name: str, overrides: list[str], out: Path) -> dict:
    """Train ``experiment`` (relative to the repository) as ``run.name=name`` under ``out``, offline, without
    the DDP rank variables of an enclosing run; exit with its stderr if it fails."""
    cmd = [sys.executable, "-m", "klear_lab.cli", "train", str(ROOT / experiment), f"run.out_dir={out}",
           f"run.name={name}", "trainer.checkpoint=false", "tracking.wandb.enabled=false", *overrides]
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "KLEAR_RUN_DIR")}
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**env, "HF_HUB_OFFLINE": "1"})
    if done.returncode:
        sys.exit(f"{name} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    runs = sorted(out.glob(f"{name}-*/summary.json"), key=lambda p: p.stat().st_mtime)
    if not runs:
        sys.exit(f"{name} finished but wrote no {out}/{name}-*/summary.json")
    return json.loads(runs[-1].read_text())
