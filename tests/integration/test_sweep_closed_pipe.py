"""``klear-lab sweep SPEC | head -2``: the pipe closes after two lines. Each worker thread's next progress line
raised ``BrokenPipeError``, which stopped the workers and left the trials they had claimed RUNNING (a rerun
waited 60 s for their heartbeats; found by a new-user walkthrough). Now the lines go nowhere and the sweep ends.
A real sweep process on SQLite with the stand-in runner of ``tests/unit/sweep/sweep_fixtures.py``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from optuna.trial import TrialState

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "sweep"))
import sweep_fixtures as fx  # noqa: E402

from klear_lab.sweep.spec import load_spec  # noqa: E402
from klear_lab.sweep.storage import default_storage_url, open_study  # noqa: E402


def test_a_sweep_whose_output_pipe_closes_still_runs_every_trial(tmp_path):
    spec_path = fx.write_spec(tmp_path, lrs=(0.001, 0.002, 0.003), seeds=(0, 1), workers=2)
    env = {**os.environ, "KLEAR_FAKE_SLEEP": "0.3", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = " ".join(map(str, fx.sweep_cmd(spec_path, "--no-compare")))
    done = subprocess.run(f"set -o pipefail; {cmd} 2>{tmp_path / 'err.log'} | head -2", shell=True,
                          executable="/bin/bash", cwd=fx.REPO, env=env, capture_output=True, text=True, timeout=240)
    err = (tmp_path / "err.log").read_text()
    assert "BrokenPipeError" not in err, err[-3000:]
    assert len(done.stdout.splitlines()) == 2
    spec = load_spec(spec_path)
    trials = open_study(spec, default_storage_url(spec), create=False).get_trials(deepcopy=False)
    assert sorted(t.state.name for t in trials) == ["COMPLETE"] * 6
    assert not [t for t in trials if t.state == TrialState.RUNNING]
