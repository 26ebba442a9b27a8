"""``klear-lab compare --baseline ARM``, and which ``baseline:`` the table used when given a spec file (as it
is now) or a sweep directory (its frozen spec.yaml): the table says where its baseline came from."""

from __future__ import annotations

import os
import subprocess

import yaml
from sweep_fixtures import REPO, sweep_cmd, write_spec

from klear_lab.cli_sweep import main


def _finished_sweep(tmp_path):
    spec = write_spec(tmp_path, lrs=(0.001, 0.002), seeds=(0, 1), baseline={"optim.lr": 0.001})
    env = {**os.environ, "KLEAR_FAKE_SLEEP": "0.01", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(sweep_cmd(spec, "--workers", "2", "--no-compare"), cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return spec, tmp_path / "out" / "toy"


def test_compare_baseline_flag_and_where_the_baseline_came_from(tmp_path, capsys):
    spec, sweep_dir = _finished_sweep(tmp_path)
    table = sweep_dir / "compare" / "table.md"
    body = yaml.safe_load(spec.read_text())
    spec.write_text(yaml.safe_dump({**body, "baseline": "lr=0.002"}))  # edited after the sweep ran

    assert main(["compare", str(spec)]) == 0
    assert "vs lr=0.002" in table.read_text()
    said = f"baseline lr=0.002: `baseline:` of {spec} as it is now; the sweep ran with baseline lr=0.001"
    assert said in table.read_text()
    assert main(["compare", str(sweep_dir)]) == 0
    assert "vs lr=0.001" in table.read_text()
    assert f"baseline lr=0.001: `baseline:` of {sweep_dir / 'spec.yaml'}, the spec the sweep ran" in table.read_text()

    assert main(["compare", str(sweep_dir), "--baseline", "lr=0.002"]) == 0
    assert "vs lr=0.002" in table.read_text() and "baseline lr=0.002: from --baseline" in table.read_text()
    assert main(["compare", str(sweep_dir), "--baseline", "{optim.lr: 0.002}"]) == 0  # the mapping form
    assert "vs lr=0.002" in table.read_text()
    capsys.readouterr()

    assert main(["compare", str(sweep_dir), "--baseline", "lr=0.02"]) == 2
    assert "--baseline lr=0.02: no arm is labelled 'lr=0.02'; arms: lr=0.001, lr=0.002" in capsys.readouterr().err
    assert main(["compare", str(sweep_dir), "--baseline", "{optim.lrr: 0.002}"]) == 2
    assert "optim.lrr: not an axis of this sweep (axes: optim.lr)" in capsys.readouterr().err


def test_compare_spec_needs_the_results_not_the_base_experiment(tmp_path, capsys):
    """The base experiment moved or deleted after the sweep: comparing still reads the results, while
    running the spec again (which composes trials) is refused, naming the missing file."""
    spec, sweep_dir = _finished_sweep(tmp_path)
    (tmp_path / "exp.yaml").unlink()
    assert main(["compare", str(spec)]) == 0, capsys.readouterr().err
    assert "vs lr=0.001" in (sweep_dir / "compare" / "table.md").read_text()
    assert main(["sweep", str(spec), "--validate-only"]) == 2
    assert "experiment: 'exp.yaml' not found" in capsys.readouterr().err
