"""The sweep's own process neither trains nor builds a model: it composes configs, runs the study and starts
trial processes (forked from a server that imports the training stack once). It imported Lightning (a name
beside the trials' callback) and transformers (the registry's model builder): about 7 s of one core in every
sweep, every `--join` worker and every sweep test."""

from __future__ import annotations

import os
import subprocess
import sys

from sweep_fixtures import REPO, write_spec


def test_the_sweep_process_imports_neither_lightning_nor_transformers_nor_wandb(tmp_path):
    spec = write_spec(tmp_path, lrs=(0.001,), workers=1)
    code = ("import atexit, runpy, sys\n"
            "atexit.register(lambda: print('LOADED', sorted(m for m in ('lightning', 'transformers', 'wandb')\n"
            "                                        if m in sys.modules)))\n"
            f"sys.argv = ['klear-lab', 'sweep', {str(spec)!r}]\n"
            "runpy.run_module('klear_lab.cli_sweep', run_name='__main__')\n")
    env = {**os.environ, "KLEAR_FAKE_SLEEP": "0.1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "WANDB_MODE": "offline"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "COMPLETE val/acc=0.1" in out.stdout  # a trial ran (in its own process, which imports them)
    assert out.stdout.strip().splitlines()[-1] == "LOADED []"
