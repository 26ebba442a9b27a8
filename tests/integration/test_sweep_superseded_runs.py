"""A point's earlier runs are marked superseded once a later attempt ran it again in a run of its own, end to
end (real sweep processes, trial subprocesses, SQLite): a run whose trial was killed before it recorded the
run in the study, and a run that failed on its own error.

The runner below stands in for ``run_experiment`` as the fixtures' does, making its run directory as
``run_experiment`` does (``config.yaml``, ``run.json``), then, on a marker file in the sweep directory:
``orphan-<lr>``: SIGKILLs itself before training starts (where ``RecordRunDir`` names the run in the study);
``crash-<lr>``: fails after training started, recording its error in ``run.json``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "sweep"))
import sweep_fixtures as fx  # noqa: E402

from klear_lab.run_list import list_runs  # noqa: E402
from klear_lab.sweep.spec import load_spec  # noqa: E402
from klear_lab.sweep.storage import default_storage_url, open_study  # noqa: E402

RUNNER = f"{Path(__file__).resolve()}:run_dying"


def run_dying(cfg: dict[str, Any], callbacks: list | None = None) -> dict[str, Any]:
    """:func:`sweep_fixtures.run`, unless a marker file makes it die or fail in a run directory of its own."""
    from klear_lab import tracking
    from klear_lab.run_owner import running_process

    sweep_dir, lr = Path(cfg["run"]["out_dir"]).parent, cfg["optim"]["lr"]
    orphan, crash = sweep_dir / f"orphan-{lr}", sweep_dir / f"crash-{lr}"
    if not orphan.exists() and not crash.exists():
        return fx.run(cfg, callbacks)
    run_dir = tracking.create_run_dir(cfg)
    tracking.write_config(run_dir, cfg)
    identity = tracking.identity_of(cfg, run_dir)
    tracking.write_json(run_dir / "run.json", {**identity, "status": "running", **running_process()})
    if orphan.exists():
        orphan.unlink()
        os.kill(os.getpid(), signal.SIGKILL)  # killed while building the model, say
    crash.unlink()
    trainer = SimpleNamespace(is_global_zero=True, default_root_dir=str(run_dir))
    for cb in callbacks or []:
        getattr(cb, "on_fit_start", lambda *_: None)(trainer, None)
    tracking.write_json(run_dir / "run.json", {**identity, "status": "failed", "error": "RuntimeError: boom"})
    raise RuntimeError("boom")


def _sweep(spec_path: Path, log: Path) -> int:
    proc = fx.start_sweep(spec_path, "--workers", "1", log=log)
    try:
        return proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"sweep did not finish in 300s:\n{log.read_text()[-3000:]}") from None


def test_runs_the_rerun_of_a_sweep_ran_again_are_superseded(tmp_path):
    """The killed trial's run said "running" for ever (``klear-lab runs``: stopped, "run the sweep again"),
    the crashed one "failed: RuntimeError: boom" with advice to rerun; the rerun of the sweep had run both
    points again, and neither was marked superseded."""
    spec_path = fx.write_spec(tmp_path, name="orphans", lrs=(0.001, 0.002), runner=RUNNER)
    spec = load_spec(spec_path)
    spec.sweep_dir.mkdir(parents=True)
    (spec.sweep_dir / "orphan-0.001").write_text("")
    (spec.sweep_dir / "crash-0.002").write_text("")
    log = tmp_path / "sweep.log"
    _sweep(spec_path, log)  # both trials fail
    study = open_study(spec, default_storage_url(spec), create=False, heartbeat=False)
    assert [t.state.name for t in study.get_trials()] == ["FAIL", "FAIL"], log.read_text()[-3000:]
    assert "run_dir" not in study.get_trials()[0].user_attrs  # killed before its run was recorded
    before = {row.run_dir: row for row in list_runs([spec.runs_dir])}
    assert sorted(row.status for row in before.values()) == ["failed", "stopped"]

    assert _sweep(spec_path, log) == 0, log.read_text()[-3000:]  # the rerun runs both points again
    study = open_study(spec, default_storage_url(spec), create=False, heartbeat=False)
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["FAIL", "FAIL", "COMPLETE", "COMPLETE"], log.read_text()[-3000:]
    again = {t.user_attrs["arm"]: (t.number, t.user_attrs["run_dir"]) for t in trials[2:]}
    rows = {row.run_dir: row for row in list_runs([spec.runs_dir])}
    killed = next(d for d, row in before.items() if row.status == "stopped")
    crashed = next(d for d, row in before.items() if row.status == "failed")
    number, new_run = again["lr=0.001"]
    assert rows[killed].status == "failed"
    assert rows[killed].note == f"superseded: its trial's retry started over in {new_run} (trial {number})"
    number, new_run = again["lr=0.002"]
    assert rows[crashed].note == (f"superseded: its trial's retry started over in {new_run} (trial {number}); "
                                  "its own error: RuntimeError: boom")
