"""Find a sweep from a sweep directory or a spec file, and the command that continues it; serve its study
with optuna-dashboard."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from sqlalchemy.engine import make_url

from klear_lab.errors import ConfigError
from klear_lab.sweep.spec import SweepSpec, load_spec, user_path
from klear_lab.sweep.storage import NoStudyError, default_storage_url, own_study_url


def locate(target: str | Path) -> tuple[SweepSpec, str]:
    """(spec, storage URL) from ``SWEEP_DIR`` (its frozen ``spec.yaml`` + ``sweep.json``) or a spec file.

    A sweep directory moved or copied elsewhere (same name) is the sweep there: its runs, and its study
    when that is the default ``study.db`` inside it (:func:`study_url`).

    Raises:
        ConfigError: not a sweep directory or spec file, or a moved sweep directory lacks its own ``study.db``;
            NoStudyError: a spec's relative ``out_dir`` finds no sweep from the working directory.
    """
    path = user_path(target)
    if path.is_dir():
        meta, spec = recorded_sweep(path)
        url = _checked(path, study_url(path, meta, spec), meta, spec)
        spec.out_dir = path.resolve().parent  # the directory may have moved since the sweep ran
        spec.name = meta.get("name", spec.name)
        return spec, url
    if not path.is_file():
        raise ConfigError(f"{path}: no such sweep directory or spec file")
    if (path.parent / "sweep.json").is_file() and path.suffix not in (".yaml", ".yml"):  # study.db, a table...
        raise ConfigError(f"{path}: a file of the sweep directory {path.parent}; give that directory (or the "
                          "sweep's spec file)")
    if path.suffix.lower() not in (".yaml", ".yml"):  # a .jsonl read as YAML said "expected '<document start>'"
        raise ConfigError(f"{path}: not a sweep directory or sweep spec: give a sweep directory (sweep_runs/NAME) "
                          "or a sweep spec .yaml (sweeps/NAME.yaml)")
    spec = load_spec(path)
    if not (spec.sweep_dir / "sweep.json").is_file():
        _check_found_here(spec)
        return spec, default_storage_url(spec)
    meta, frozen = recorded_sweep(spec.sweep_dir)
    return spec, _checked(spec.sweep_dir, study_url(spec.sweep_dir, meta, frozen), meta, frozen)


def _check_found_here(spec: SweepSpec) -> None:
    """Refuse a spec whose sweep directory, from a relative ``out_dir``, holds no sweep and no own ``study.db``,
    naming the working directory it was read from: run from another directory, opening the study said only
    "no study ... in sqlite:///CWD/...; start it", as of a sweep never run (a spec with a ``storage`` of its
    own may hold the study elsewhere: left to the caller's ``open_study``)."""
    if spec.storage or spec.out_dir.is_absolute() or (spec.sweep_dir / "study.db").is_file():
        return
    raise NoStudyError(f"{spec.path}: no study {spec.name!r} in {default_storage_url(spec)}; start it with "
                       f"`{spec.launch_command()}` first, or, if it ran, run from the directory it ran in or give "
                       f"its sweep directory: out_dir {str(spec.out_dir)!r} is read relative to the working "
                       f"directory {Path.cwd()}")


def recorded_sweep(sweep_dir: Path) -> tuple[dict, SweepSpec]:
    """``sweep_dir``'s ``sweep.json`` and frozen ``spec.yaml`` as the sweep wrote them (``out_dir``: where it ran)."""
    meta_path, frozen = sweep_dir / "sweep.json", sweep_dir / "spec.yaml"
    missing = [p.name for p in (meta_path, frozen) if not p.is_file()]
    if missing:
        what = "not a sweep directory (no sweep.json or spec.yaml)" if len(missing) == 2 else \
            f"a sweep directory without its {missing[0]} (a sweep writes sweep.json and spec.yaml as it starts)"
        inside = sorted(p.parent.name for p in sweep_dir.glob("*/sweep.json")) if len(missing) == 2 else []
        sweeps = f" (the sweeps in it: {', '.join(inside[:8])}{' ...' if len(inside) > 8 else ''})" if inside else ""
        raise ConfigError(f"{sweep_dir}: {what}; give the sweep's directory or its spec file{sweeps}")
    return json.loads(meta_path.read_text()), load_spec(frozen)


def study_url(sweep_dir: Path, meta: dict, frozen: SweepSpec) -> str:
    """The storage URL of the study of ``sweep_dir`` (``meta``, ``frozen``: :func:`recorded_sweep`).

    ``sweep.json`` records an absolute URL. When it is the default SQLite file inside the directory the sweep
    ran in, the study travels with the directory: a moved sweep read the old place (no study there), a copy
    the original's study. A storage the spec gave (PostgreSQL, an SQLite file elsewhere) stays as recorded.
    """
    url = meta["storage"]
    parsed = make_url(url)
    ran_in = frozen.sweep_dir / "study.db"  # the frozen out_dir is absolute and resolved
    if parsed.get_backend_name() != "sqlite" or Path(parsed.database or "") not in (ran_in, ran_in.resolve()):
        return url
    return own_study_url(sweep_dir)


def _checked(sweep_dir: Path, url: str, meta: dict, frozen: SweepSpec) -> str:
    """``url``, unless it is the own ``study.db`` of ``sweep_dir``, moved or copied from where it ran, and that
    is missing: opening it said "no study ... start it with `klear-lab sweep SWEEP_DIR/spec.yaml`", which
    starts a new study where the sweep once ran."""
    moved = sweep_dir.resolve() != frozen.sweep_dir.resolve()
    if moved and url == own_study_url(sweep_dir) and not (sweep_dir / "study.db").is_file():
        raise ConfigError(f"{sweep_dir}: no study.db in this sweep directory, moved or copied without it from "
                          f"{frozen.sweep_dir}, where the sweep ran (its study {meta.get('name')!r} is kept in it)")
    return url


def rerun_command(sweep_dir: Path) -> str | None:
    """The ``klear-lab sweep ...`` that continues the study of ``sweep_dir``, or None (not a sweep directory,
    or no spec here that continues it).

    The spec it was launched from when that names this study in this directory (from the working
    directory, as ``out_dir`` is read), with ``--name`` / ``--out-dir`` where the sweep was given them, and
    still runs the sweep the study recorded (:func:`same_sweep`: its experiment, axes, seeds, sampler and
    objective); else the frozen ``SWEEP_DIR/spec.yaml`` (the spec edited or gone, or command-line overrides),
    with ``--out-dir`` if the directory moved. Advice without ``--name``/``--out-dir`` continued another study,
    and the launch spec edited since (another experiment, an axis value added) started another sweep in it.
    """
    try:
        meta, frozen = recorded_sweep(sweep_dir)
    except Exception:  # noqa: BLE001 - a damaged sweep directory: no advice, not a traceback in `runs`
        return None
    return _rerun_of(sweep_dir, meta, frozen)


def continue_command(sweep_dir: Path, fallback: str | Path | None = None) -> str:
    """:func:`rerun_command`, else ``klear-lab sweep FALLBACK`` (default: the launch spec ``sweep.json``
    names, or the frozen one), unless the directory was moved or copied from where the sweep ran (its
    frozen spec names that place's study, from an older version): then no command continues it from here,
    and saying one would start a study anew or continue the original's."""
    try:
        meta, frozen = recorded_sweep(sweep_dir)
    except Exception:  # noqa: BLE001 - a damaged sweep directory: the launch spec, as before
        return f"klear-lab sweep {fallback or _launch_spec(sweep_dir)}"
    command = _rerun_of(sweep_dir, meta, frozen)
    if command:
        return command
    if frozen.sweep_dir.resolve() != sweep_dir.resolve():
        return f"(no command continues it from {sweep_dir}: the sweep ran in {frozen.sweep_dir})"
    return f"klear-lab sweep {fallback or meta.get('spec') or sweep_dir / 'spec.yaml'}"


def _launch_spec(sweep_dir: Path) -> str:
    """The spec ``sweep.json`` names, read alone (a damaged one, or no frozen spec: :func:`recorded_sweep`
    refused the directory); else the frozen spec's path."""
    try:
        meta = json.loads((sweep_dir / "sweep.json").read_text())
    except (OSError, ValueError):
        meta = None
    spec = meta.get("spec") if isinstance(meta, dict) else None
    return str(spec) if spec else str(sweep_dir / "spec.yaml")


def _rerun_of(sweep_dir: Path, meta: dict, frozen: SweepSpec) -> str | None:
    """:func:`rerun_command` of a sweep directory already read (:func:`recorded_sweep`)."""
    try:
        url = _checked(sweep_dir, study_url(sweep_dir, meta, frozen), meta, frozen)  # moved without its study
        want = (sweep_dir.resolve(), meta["name"], url, frozen)
    except Exception:  # noqa: BLE001 - a damaged sweep directory: no advice, not a traceback in `runs`
        return None
    for path in (meta.get("spec"), sweep_dir / "spec.yaml"):
        command = _continuing(Path(path), *want) if path else None
        if command:
            return command
    return None


def _continuing(spec_path: Path, sweep_dir: Path, name: str, url: str, frozen: SweepSpec) -> str | None:
    """``klear-lab sweep SPEC [--name N] [--out-dir D]`` if that runs the study ``name`` in ``url`` with its
    runs in ``sweep_dir``, the same overrides as ``frozen`` (the sweep's frozen spec) and the same sweep
    (:func:`same_sweep`), else None."""
    try:
        own = load_spec(spec_path)
        spec = dataclasses.replace(own, name=name, out_dir=sweep_dir.parent)
        if default_storage_url(spec) != url or spec.absolute_overrides() != frozen.absolute_overrides() \
                or same_sweep(spec, frozen) is not None:
            return None
    except Exception:  # noqa: BLE001 - an edited spec that no longer loads (a bad storage URL...): not this one
        return None
    return spec.launch_command(own)


def same_sweep(spec: SweepSpec, recorded: SweepSpec) -> str | None:
    """None when ``spec`` runs the sweep ``recorded`` (a sweep directory's frozen spec) ran, else what differs
    (``experiment``, ``axes``...): the same base experiment file, axes (keys, values, labels, ranges), seeds,
    sampler and objective. A launch spec edited since the sweep ran otherwise continued its study as another
    sweep (widened with the values added, or with the finished trials of another experiment). ``n_trials``,
    ``workers`` and the like may change: the study stays the same."""
    def experiment(s: SweepSpec) -> Path | None:
        return s.experiment.resolve() if s.experiment is not None else None

    parts = {"experiment": experiment, "axes": lambda s: s.axes, "seeds": lambda s: list(s.seeds),
             "sampler": lambda s: s.sampler, "objective": lambda s: (s.metric, s.direction)}
    changed = [key for key, part in parts.items() if part(spec) != part(recorded)]
    return ", ".join(changed) or None


def serve_dashboard(target: str | Path, host: str = "127.0.0.1", port: int = 8080) -> None:
    """Serve optuna-dashboard for the sweep's storage (blocks until interrupted)."""
    import optuna_dashboard

    from klear_lab.sweep.storage import make_storage, open_study

    spec, url = locate(target)
    current = open_study(spec, url, create=False, heartbeat=False).study_name  # NAME@v2 once widened
    check_listen(host, port)
    print(f"optuna-dashboard for study {current!r} ({url}) at http://{host}:{port}/dashboard", flush=True)
    optuna_dashboard.run_server(make_storage(url), host=host, port=port)


def check_listen(host: str, port: int) -> None:
    """Refuse, with the address named, a host and port the dashboard cannot listen on (a second dashboard
    on the port, a port out of range, a host name that does not resolve): the server raised a traceback."""
    import socket

    if not 0 <= port <= 65535:
        raise ConfigError(f"--port {port}: not a port (0-65535)")
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server's own (http.server)
            probe.bind((host, port))
    except OSError as exc:  # (socket.gaierror is one)
        reason = exc.strerror or exc
        raise ConfigError(f"cannot listen on {host}:{port}: {reason} (another --port or --host?)") from None
