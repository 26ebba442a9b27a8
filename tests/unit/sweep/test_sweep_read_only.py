"""A sweep directory that cannot be written (a read-only mount, another user's): ``compare`` says so and writes
elsewhere with ``--out-dir``, ``dashboard`` reads it; an SQLite storage whose lock cannot be made is named.
``compare --rescore`` of one: ``tests/integration/test_sweep_rescore.py``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from sweep_fixtures import REPO, sweep_cmd, write_spec

from klear_lab.cli_sweep import main
from klear_lab.errors import ConfigError
from klear_lab.sweep.path_checks import writable_dir

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap makes the read-only mount")


def _finished_sweep(tmp_path):
    spec = write_spec(tmp_path, lrs=(0.001, 0.002))
    env = {**os.environ, "KLEAR_FAKE_SLEEP": "0.01", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(sweep_cmd(spec, "--no-compare"), cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return tmp_path / "out" / "toy"


def _read_only(sweep_dir, *argv: str) -> subprocess.CompletedProcess:
    """``argv`` run with ``sweep_dir`` mounted read-only (bwrap: a real mount, which root cannot write either)."""
    return subprocess.run(["bwrap", "--bind", "/", "/", "--ro-bind", str(sweep_dir), str(sweep_dir), "--dev", "/dev",
                           "--proc", "/proc", *argv], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})


@needs_bwrap
def test_compare_of_a_read_only_sweep_names_it_and_writes_elsewhere_when_told(tmp_path):
    sweep_dir = _finished_sweep(tmp_path)
    (sweep_dir / "study.db.lock").unlink()  # not there in a copy of the results: a reader must not need it
    cli = [sys.executable, "-m", "klear_lab.cli_sweep"]
    refused = _read_only(sweep_dir, *cli, "compare", str(sweep_dir))
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert f"cannot write to {sweep_dir / 'compare'}: Read-only file system" in refused.stderr
    assert "--out-dir" in refused.stderr and "Traceback" not in refused.stderr
    elsewhere = tmp_path / "tables"
    done = _read_only(sweep_dir, *cli, "compare", str(sweep_dir), "--out-dir", str(elsewhere))
    assert done.returncode == 0, done.stderr[-2000:]
    assert {p.name for p in elsewhere.iterdir()} == {"table.csv", "table.md", "curves.png"}
    assert "lr=0.002" in (elsewhere / "table.md").read_text()
    read = _read_only(sweep_dir, sys.executable, "-c", (  # what `dashboard` does before it serves
        "import sys; from klear_lab.sweep.locate import locate; from klear_lab.sweep.storage import open_study;"
        f"spec, url = locate({str(sweep_dir)!r}); study = open_study(spec, url, create=False, heartbeat=False);"
        "print(len(study.trials))"))
    assert read.returncode == 0 and read.stdout.split() == ["2"], read.stderr[-2000:]


def test_a_directory_that_cannot_be_made_is_named(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match=f"cannot write to {tmp_path / 'file' / 'compare'}: Not a directory; hint"):
        writable_dir(tmp_path / "file" / "compare", "; hint")
    writable_dir(tmp_path / "made" / "compare")
    assert list((tmp_path / "made" / "compare").iterdir()) == []  # the probe file is gone


def test_an_sqlite_storage_whose_lock_cannot_be_made_stops_the_sweep_with_its_name(tmp_path, capsys):
    spec = write_spec(tmp_path, storage="sqlite:////proc/klear-no-such.db")
    assert main(["sweep", str(spec)]) == 2
    err = capsys.readouterr().err
    assert "cannot open /proc/klear-no-such.db.lock, the lock beside the study's SQLite file" in err
