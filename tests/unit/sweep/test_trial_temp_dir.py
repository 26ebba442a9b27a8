"""A trial's temporary files are removed when it ends: a forked trial ends with ``os._exit``, which skips the
finalizers that remove them, and each sweep trial left W&B's table directory in ``/tmp``."""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from sweep_fixtures import REPO, TEMP_RUNNER, sweep_cmd, write_spec


@pytest.fixture
def system_temp():
    """A short temporary directory to serve as the sweep's ``TMPDIR``: multiprocessing's forkserver binds a
    socket in it, whose path may not pass 107 bytes (pytest-xdist's ``tmp_path`` under it did)."""
    path = Path(tempfile.mkdtemp(prefix="kt-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("start", ["preloaded", "fresh"])
def test_a_trial_writes_its_temporary_files_in_its_own_directory_removed_as_it_ends(tmp_path, system_temp, start):
    spec = write_spec(tmp_path, lrs=(0.001, 0.002), runner=TEMP_RUNNER, trial_start=start)
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}  # torch sets it in a process
    env.update({"KLEAR_FAKE_SLEEP": "0", "OMP_NUM_THREADS": "1", "TMPDIR": str(system_temp)})  # that compiled
    done = subprocess.run(sweep_cmd(spec, "--no-compare"), cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    used = [Path((tmp_path / "out" / "toy" / f"tempdir-{lr}-0").read_text()) for lr in (0.001, 0.002)]
    assert all(p.parent.parent == system_temp and p.parent.name.startswith("klear-trial-") for p in used), used
    assert used[0].parent != used[1].parent  # one directory per trial
    caches = {(tmp_path / "out" / "toy" / f"compile-cache-{lr}-0").read_text() for lr in (0.001, 0.002)}
    assert caches == {str(system_temp / f"torchinductor_{getpass.getuser()}")}  # torch.compile's: shared, kept
    left = [p.name for p in system_temp.iterdir() if not p.name.startswith("torchinductor_")]  # torch's cache
    assert left == []  # the sweep's own temporary files are gone at its end too


def test_a_killed_sweeps_trial_directories_are_removed_by_the_next_sweep(tmp_path, monkeypatch):
    """A ``kill -9`` of the sweep process leaves its trials' directories (it removes each once its process
    ended): the next sweep on the machine removes those of sweep processes that are gone, and only those."""
    from klear_lab.sweep.launcher import remove_orphaned_temp_dirs

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid is free now (reused within this test: vanishingly unlikely)
    for name in (f"klear-trial-{gone.pid}-ab12", f"klear-trial-{os.getpid()}-cd34", "klear-trial-x", "other"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "samples.table.json").write_text("{}")
    remove_orphaned_temp_dirs()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"klear-trial-{os.getpid()}-cd34", "klear-trial-x",
                                                                  "other"])
