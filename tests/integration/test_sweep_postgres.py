"""Two sweep processes share one study on a real PostgreSQL server (127.0.0.1) without duplicates.

The fixture starts a throw-away cluster with ``scripts/pg_test_server.sh`` (Debian's
postgresql-15 binaries) and stops it afterwards; the test is skipped where they are missing.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "sweep"))
import sweep_fixtures as fx  # noqa: E402

from klear_lab.sweep.spec import load_spec  # noqa: E402
from klear_lab.sweep.storage import open_study  # noqa: E402

SCRIPT = fx.REPO / "scripts" / "pg_test_server.sh"


@pytest.fixture(scope="module")
def pg_url():
    pytest.importorskip("psycopg")
    if not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")):
        pytest.skip("PostgreSQL server binaries not installed")
    data = tempfile.mkdtemp(prefix="klear-pg-", dir="/tmp")
    try:
        out = subprocess.run(["bash", str(SCRIPT), "start", data], capture_output=True, text=True,
                             timeout=120)
        if out.returncode != 0:
            pytest.skip(f"could not start PostgreSQL: {out.stderr.strip()[-500:]}")
        yield out.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", data], capture_output=True, timeout=120)
        shutil.rmtree(data, ignore_errors=True)


OPEN_AT = """
import sys, time
from klear_lab.sweep.storage import make_storage
url, start = sys.argv[1], float(sys.argv[2])
time.sleep(max(0.0, start - time.time()))
make_storage(url, heartbeat_interval=10)
"""


def test_processes_opening_a_fresh_database_at_once_all_succeed(pg_url):
    """Every opener of an empty database creates Optuna's tables; the ones that lose the race open again.

    Before ``storage._rdb_storage`` one of two processes started together failed on every try
    (``duplicate key value violates unique constraint "pg_type_typname_nsp_index"``): CI's run of
    ``test_two_workers_share_a_postgres_study`` lost its main sweep that way.
    """
    from sqlalchemy import create_engine, text

    admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
    for i in range(3):
        name = f"fresh_{i}"
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name}"))
            conn.execute(text(f"CREATE DATABASE {name}"))
        url = pg_url.rsplit("/", 1)[0] + f"/{name}"
        start = time.time() + 2.0  # after every child has imported
        procs = [subprocess.Popen([sys.executable, "-c", OPEN_AT, url, str(start)], stderr=subprocess.PIPE,
                                  text=True) for _ in range(3)]
        errors = [p.communicate(timeout=120)[1] for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0], "\n".join(errors)[-3000:]
    admin.dispose()


def test_two_workers_share_a_postgres_study(tmp_path, pg_url):
    spec_path = fx.write_spec(tmp_path, name="pgsweep", lrs=(0.001, 0.002, 0.003), seeds=(0, 1),
                              storage=pg_url)
    log = tmp_path / "sweep.log"
    main = fx.start_sweep(spec_path, "--workers", "1", sleep=1.0, log=log)
    joiner = fx.start_sweep(spec_path, "--join", "--workers", "1", sleep=1.0, log=log)
    for proc in (main, joiner):
        try:
            assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError(log.read_text()[-3000:]) from None
    spec = load_spec(spec_path)
    study = open_study(spec, pg_url, create=False, heartbeat=False)
    trials = study.get_trials()
    assert len(trials) == 6 and all(t.state.name == "COMPLETE" for t in trials)
    assert len({t.user_attrs["point"] for t in trials}) == 6
    calls = fx.invocations(spec.sweep_dir)
    assert len(calls) == 6 and len({(lr, s) for lr, s, _, _ in calls}) == 6
    assert {sweep_pid for *_, sweep_pid in calls} == {main.pid, joiner.pid}  # the joined worker took work too
    assert (spec.sweep_dir / "compare" / "table.csv").is_file()  # written by the main process


def _wait_ok(procs, log: Path) -> None:
    for proc in procs:
        try:
            assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError(log.read_text()[-3000:]) from None


def test_widened_grid_continues_on_postgres_and_a_joined_worker_follows(tmp_path, pg_url):
    spec_path = fx.write_spec(tmp_path, name="pggrow", lrs=(0.001, 0.002), seeds=(0,), storage=pg_url)
    log = tmp_path / "sweep.log"
    _wait_ok([fx.start_sweep(spec_path, "--workers", "1", log=log)], log)
    fx.write_spec(tmp_path, name="pggrow", lrs=(0.001, 0.002, 0.003), seeds=(0, 1), storage=pg_url)
    main = fx.start_sweep(spec_path, "--workers", "1", sleep=1.0, log=log)
    joiner = fx.start_sweep(spec_path, "--join", "--workers", "1", sleep=1.0, log=log)
    _wait_ok([main, joiner], log)
    spec = load_spec(spec_path)
    study = open_study(spec, pg_url, create=False, heartbeat=False)
    assert study.study_name == "pggrow@v2"
    assert sorted(t.user_attrs["point"] for t in study.get_trials() if t.state.name == "COMPLETE") == sorted(
        {t.user_attrs["point"] for t in study.get_trials()})
    calls = fx.invocations(spec.sweep_dir)
    assert sorted((lr, s) for lr, s, _, _ in calls) == [(lr, s) for lr in (0.001, 0.002, 0.003) for s in (0, 1)]
