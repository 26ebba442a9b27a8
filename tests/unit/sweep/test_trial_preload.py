"""A trial forked from the preloaded server imports nothing heavy of its own before its runner starts.

Every trial builds Lightning callbacks (``record.py``, ``pruning.py``) whatever its runner, and those were
not preloaded for custom runners: each forked trial imported Lightning and torch again (~5 s of every
stand-in trial on the 2-core CPU, the bulk of the sweep tests' time).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

AFTER_PRELOAD = textwrap.dedent("""
    import importlib, sys
    from klear_lab.sweep.launcher import PRELOAD_BASE
    for name in PRELOAD_BASE:
        importlib.import_module(name)
    before = set(sys.modules)
    import optuna
    from klear_lab.sweep.trial import _callbacks
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage)
    trial = optuna.trial.Trial(study, study.ask()._trial_id)
    _callbacks(trial, {"pruner": sys.argv[1], "objective": "val/acc"})
    heavy = sorted(m for m in set(sys.modules) - before if m.split(".")[0] in ("torch", "lightning", "transformers"))
    print(len(heavy), heavy[:5])
""")


@pytest.mark.parametrize("pruner", ["none", "median"])
def test_a_custom_runners_trial_finds_its_callbacks_modules_preloaded(pruner):
    out = subprocess.run([sys.executable, "-c", AFTER_PRELOAD, pruner], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[0] == "0", out.stdout  # no torch, Lightning or transformers module left to import
