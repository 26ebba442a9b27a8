"""Optuna RDB storage with heartbeats, the study's sampler and pruner, and a cross-process lock.

Heartbeats: a worker records one per running trial every ``heartbeat_interval`` seconds; a
trial whose heartbeats stop for two intervals (its worker was killed) is failed by
``optuna.storages.fail_stale_trials`` and re-enqueued by ``RetryHeartbeatStaleTrialCallback``.

The lock serialises the few read-then-write steps (enqueue missing points, pop a WAITING
trial, ask a sampler for a new one): an ``flock`` file beside an SQLite database, a
PostgreSQL advisory lock keyed by the study name, nothing for other backends (Optuna's
row lock on pop still holds there).
"""

from __future__ import annotations

import contextlib
import fcntl
import time
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
from sqlalchemy.engine import make_url

from klear_lab.errors import ConfigError
from klear_lab.sweep.spec import SweepSpec, user_path

SUCCESSOR_ATTR = "klear.successor"  # set on a study continued elsewhere (see ``successor.py``)


def default_storage_url(spec: SweepSpec) -> str:
    """The spec's ``storage``, else an SQLite file ``study.db`` in the sweep directory.

    A relative SQLite path is made absolute (from the working directory, as ``out_dir`` is; ``~`` is the
    home directory): the URL is saved in ``sweep.json``, and ``compare``/``dashboard`` run from elsewhere
    made a new, empty database beside them.
    """
    if not spec.storage:
        return own_study_url(spec.sweep_dir)
    url = make_url(spec.storage)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:" \
            or Path(url.database).is_absolute():
        return spec.storage
    return url.set(database=str(user_path(url.database).resolve())).render_as_string(hide_password=False)


def check_storage_url(url: str | None, spec: SweepSpec | None = None) -> None:
    """A parseable SQLAlchemy URL whose dialect and driver are installed (no connection made)."""
    if url is None:
        return
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    def fail(message: str) -> ConfigError:
        return spec.err("storage", message) if spec else ConfigError(f"storage: {message}")

    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise fail(f"{url!r} is not an SQLAlchemy URL ({exc}); e.g. sqlite:///study.db or "
                   "postgresql+psycopg://user@127.0.0.1:5432/db") from None
    try:
        parsed.get_dialect().import_dbapi()
    except (NoSuchModuleError, ImportError) as exc:
        raise fail(f"{url!r}: database driver not available: {exc}") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise fail(f"{url!r}: workers share the study through a file; give sqlite:///PATH")


def own_study_url(sweep_dir: Path) -> str:
    """The URL of the SQLite file ``study.db`` in ``sweep_dir`` (absolute): where a sweep keeps its study when
    its spec gives no ``storage``, and where a moved or copied sweep directory keeps it (``locate.study_url``)."""
    return f"sqlite:///{(sweep_dir / 'study.db').resolve()}"


def make_storage(url: str, heartbeat_interval: int | None = None, max_retry: int | None = 3,
                 ) -> optuna.storages.RDBStorage:
    """An RDBStorage; with ``heartbeat_interval``, stale trials are failed and retried."""
    sqlite = make_url(url).get_backend_name() == "sqlite"
    if sqlite:
        Path(make_url(url).database).parent.mkdir(parents=True, exist_ok=True)
    engine_kwargs = {"connect_args": {"timeout": 120}} if sqlite else {"pool_pre_ping": True}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            retry = (optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry) if heartbeat_interval
                     else None)
            return _rdb_storage(
                url, engine_kwargs=engine_kwargs, heartbeat_interval=heartbeat_interval,
                grace_period=2 * heartbeat_interval if heartbeat_interval else None,
                heartbeat_stale_trial_callback=retry)
    except Exception as exc:  # sqlalchemy OperationalError, bad database name...
        raise ConfigError(f"storage {redacted(url)}: cannot open: {exc}") from None


SCHEMA_RACE_TRIES = 5


def _rdb_storage(url: str, **kwargs) -> optuna.storages.RDBStorage:
    """``RDBStorage(url, **kwargs)``, tried again when another process created its tables at the same moment.

    On an empty database every opener creates Optuna's tables (``create_all``: look, then create). Two at once
    -- a sweep and its ``--join`` worker started together on a fresh PostgreSQL database, ``compare`` beside
    a starting sweep -- and the slower one fails with a duplicate key or "already exists". The tables are
    whole by then (each creation is one transaction), so opening again finds them.
    """
    for attempt in range(1, SCHEMA_RACE_TRIES):
        try:
            return optuna.storages.RDBStorage(url, **kwargs)
        except Exception as exc:
            if not _lost_schema_race(exc):
                raise
        time.sleep(0.1 * attempt)
    return optuna.storages.RDBStorage(url, **kwargs)  # the last try: whatever it raises stands


def _lost_schema_race(exc: Exception) -> bool:
    """A table, type or version row created by another opener in between (PostgreSQL, SQLite, MySQL wording:
    SQLite says "UNIQUE constraint failed" of the version row)."""
    from sqlalchemy import exc as sa_exc

    if not isinstance(exc, (sa_exc.IntegrityError, sa_exc.ProgrammingError, sa_exc.OperationalError)):
        return False
    message = str(getattr(exc, "orig", None) or exc).lower()
    return any(said in message for said in ("already exists", "duplicate key", "duplicate entry",
                                             "unique constraint failed"))


def make_sampler(spec: SweepSpec, trial_number: int = 0) -> optuna.samplers.BaseSampler:
    """The sampler that draws trial ``trial_number``'s parameters, seeded ``sampler_seed + trial_number``.

    One seed per trial, not per sampler: every worker (and every rerun) builds its own sampler, and
    samplers seeded alike drew the same values in each of them. Grid trials are all enqueued with
    fixed params, so their sampler never samples.
    """
    seed = (spec.sampler_seed + trial_number) % 2**32  # numpy's seed range
    if spec.sampler == "tpe":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(seed=seed, constant_liar=spec.workers > 1)
    return optuna.samplers.RandomSampler(seed=seed)


def make_pruner(name: str, n_startup_trials: int = 1) -> optuna.pruners.BasePruner:
    """``none`` | ``median`` (after ``n_startup_trials``, e.g. one per seed) | ``hyperband``."""
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=n_startup_trials, n_warmup_steps=0)
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner()
    return optuna.pruners.NopPruner()


def open_study(spec: SweepSpec, url: str, *, create: bool, heartbeat: bool = True) -> optuna.Study:
    """Create (or resume) the study named ``spec.name``; with ``create=False`` it must exist.

    A study continued in a successor (a widened grid, ``successor.py``) hands over to it: the
    returned study is the current one, whose ``study_name`` may be ``NAME@v2``.
    """
    if not create and _missing_sqlite_file(url):  # opening it would create the file, its lock and directory
        raise _no_study(spec, url)
    # the lock orders the creators; a reader (``--join``, ``compare``) opens without it (a read-only or another
    # user's sweep directory has no lock file it could open), and loses a schema race to no one (``_rdb_storage``)
    with StudyLock(url, "klear-lab storage init").hold() if create else contextlib.nullcontext():
        storage = make_storage(url, spec.heartbeat_interval if heartbeat else None, spec.max_retry)
        kwargs = {"study_name": spec.name, "storage": storage, "sampler": make_sampler(spec),
                  "pruner": make_pruner(spec.pruner, len(spec.seeds))}
        if create:
            return current_study(optuna.create_study(direction=spec.direction, load_if_exists=True, **kwargs))
    try:
        return current_study(optuna.load_study(**kwargs))
    except KeyError:
        raise _no_study(spec, url) from None


class NoStudyError(ConfigError):
    """The storage opened and holds no study of that name (``open_study(create=False)``): not a failure to open it."""


def _no_study(spec: SweepSpec, url: str) -> ConfigError:
    return NoStudyError(f"{spec.path}: no study {spec.name!r} in {redacted(url)}; start it with "
                       f"`{spec.launch_command()}` first")


def _missing_sqlite_file(url: str) -> bool:
    """An SQLite URL whose database file does not exist (``compare`` or ``dashboard`` of a sweep never run)."""
    parsed = make_url(url)
    return parsed.get_backend_name() == "sqlite" and not Path(parsed.database or "").is_file()


def current_study(study: optuna.Study) -> optuna.Study:
    """``study``, or the successor it was continued in (a widened grid, ``successor.py``), transitively."""
    seen = {study.study_name}
    while (successor := study.user_attrs.get(SUCCESSOR_ATTR)) and successor not in seen:
        seen.add(successor)
        study = optuna.load_study(study_name=successor, storage=study._storage, sampler=study.sampler,
                                  pruner=study.pruner)
    return study


class StudyLock:
    """Mutual exclusion across threads, processes and (PostgreSQL) machines for one study."""

    def __init__(self, url: str, study_name: str) -> None:
        parsed = make_url(url)
        self.backend = parsed.get_backend_name()
        self.key = zlib.crc32(study_name.encode()) & 0x7FFFFFFF
        self.lock_file = Path(f"{parsed.database}.lock") if self.backend == "sqlite" else None
        if self.lock_file is not None:
            try:
                self.lock_file.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # the sweep's directory (--out-dir) or an SQLite URL's
                raise _no_directory(self.lock_file, redacted(url), exc.strerror) from None
        self.engine, self.shown = None, redacted(url)
        if self.backend == "postgresql":
            from sqlalchemy import create_engine
            from sqlalchemy.pool import NullPool

            self.engine = create_engine(url, poolclass=NullPool)

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Hold the lock for the duration of the ``with`` block."""
        if self.lock_file is not None:
            try:
                fh = open(self.lock_file, "a")  # noqa: SIM115 - closed below
            except OSError as exc:  # a read-only or another user's directory; a URL into /proc
                raise _no_lock(self.lock_file, self.shown, exc.strerror) from None
            with fh:
                fcntl.flock(fh, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(fh, fcntl.LOCK_UN)
        elif self.engine is not None:
            from sqlalchemy import text

            with self.connect() as conn:
                conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": self.key})
                try:
                    yield
                finally:
                    conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": self.key})
        else:
            yield

    def connect(self) -> Any:
        """A connection to the PostgreSQL server: the first contact with it, a ConfigError when it fails."""
        from sqlalchemy import exc

        try:
            return self.engine.connect()
        except exc.SQLAlchemyError as error:  # a wrong host, port, password...
            raise ConfigError(f"storage {self.shown}: cannot connect: {getattr(error, 'orig', None) or error}"
                              ) from None


def check_storage_opens(url: str) -> None:
    """Raise the ConfigError the sweep's first opening of ``url`` meets (``open_study(create=True)``: the
    directory and lock file beside an SQLite database, a PostgreSQL server's first connection), creating
    nothing: ``--validate-only`` said OK for a storage the run then could not open. A directory or lock file
    the run would make is probed (``path_checks.creation_problem``), not made; an existing lock is opened as
    the run opens it, which changes nothing in it."""
    from klear_lab.sweep.path_checks import creation_problem

    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql":
        StudyLock(url, "klear-lab storage probe").connect().close()
    if parsed.get_backend_name() != "sqlite":
        return
    lock = Path(f"{parsed.database}.lock")
    if not lock.parent.is_dir():
        if (problem := creation_problem(lock.parent)) is not None:
            raise _no_directory(lock, redacted(url), problem)
    elif lock.exists():
        try:
            open(lock, "a").close()  # noqa: SIM115 - as ``StudyLock.hold`` opens it
        except OSError as exc:
            raise _no_lock(lock, redacted(url), exc.strerror) from None
    elif (problem := creation_problem(lock.parent)) is not None:
        raise _no_lock(lock, redacted(url), problem)


def _no_directory(lock: Path, shown: str, why: str | None) -> ConfigError:
    return ConfigError(f"cannot create {lock.parent} for the study's SQLite file ({shown}): {why}")


def _no_lock(lock: Path, shown: str, why: str | None) -> ConfigError:
    return ConfigError(f"cannot open {lock}, the lock beside the study's SQLite file ({shown}): {why}")


def redacted(url: str) -> str:
    """``url`` as shown in messages and logs: its password hidden."""
    return make_url(url).render_as_string(hide_password=True)
