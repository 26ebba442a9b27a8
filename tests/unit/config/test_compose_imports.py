"""Composing a config (every CLI command, a sweep's checks and its process) reads every registry, so every
built-in component module is imported: those must leave transformers and Lightning to the code that builds a
model or a trainer (transformers' Qwen2 and generation code cost about 3 s of each command's start here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_composing_every_axis_imports_neither_transformers_nor_lightning():
    code = ("import sys\n"
            "from klear_lab.config.compose import compose\n"
            "from klear_lab.registry import REGISTRIES\n"
            "compose('experiments/quickstart/rl.yaml'); compose('experiments/quickstart/code_sft.yaml')\n"
            "for registry in REGISTRIES.values():\n"
            "    registry.names()\n"
            "print(sorted(m for m in ('transformers', 'lightning', 'vllm') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
