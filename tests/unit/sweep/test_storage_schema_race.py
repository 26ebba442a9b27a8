"""An opener that loses the race to create Optuna's tables on an empty database opens again; any other error
stops it. The race itself, on a real PostgreSQL server: ``tests/integration/test_sweep_postgres.py``."""

from __future__ import annotations

import pytest
from sqlalchemy import exc as sa_exc

from klear_lab.sweep import storage


@pytest.mark.parametrize(("kind", "said", "lost"), [
    (sa_exc.IntegrityError, 'duplicate key value violates unique constraint "pg_type_typname_nsp_index"', True),
    (sa_exc.ProgrammingError, 'relation "studies" already exists', True),
    (sa_exc.OperationalError, "table studies already exists", True),  # SQLite
    (sa_exc.IntegrityError, "UNIQUE constraint failed: version_info.version_info_id", True),  # SQLite
    (sa_exc.IntegrityError, "(1062, \"Duplicate entry '1' for key 'PRIMARY'\")", True),  # MySQL
    (sa_exc.OperationalError, "could not connect to server: Connection refused", False),
    (sa_exc.OperationalError, "database is locked", False),
    (ValueError, "already exists", False),  # not a database error
])
def test_a_lost_schema_race_is_told_from_other_errors(kind, said, lost):
    error = kind("CREATE TABLE ...", {}, Exception(said)) if issubclass(kind, sa_exc.DBAPIError) else kind(said)
    assert storage._lost_schema_race(error) is lost


def test_a_lost_race_opens_again_and_another_error_does_not(monkeypatch, tmp_path):
    tries = []

    def flaky(url, **kwargs):
        tries.append(url)
        if len(tries) == 1:
            raise sa_exc.IntegrityError("INSERT", {}, Exception("UNIQUE constraint failed: version_info.id"))
        return "storage"

    monkeypatch.setattr(storage.optuna.storages, "RDBStorage", flaky)
    monkeypatch.setattr(storage.time, "sleep", lambda s: None)
    assert storage._rdb_storage("sqlite:///x.db") == "storage" and len(tries) == 2

    def down(url, **kwargs):
        tries.append(url)
        raise sa_exc.OperationalError("SELECT", {}, Exception("could not connect to server"))

    tries.clear()
    monkeypatch.setattr(storage.optuna.storages, "RDBStorage", down)
    with pytest.raises(sa_exc.OperationalError):
        storage._rdb_storage("postgresql://h/db")
    assert len(tries) == 1
