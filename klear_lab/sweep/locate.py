"""Find a sweep from a sweep directory or a spec file; serve its study with optuna-dashboard."""

from __future__ import annotations

import json
from pathlib import Path

from klear_lab.errors import ConfigError
from klear_lab.sweep.spec import SweepSpec, load_spec, user_path
from klear_lab.sweep.storage import default_storage_url


def locate(target: str | Path) -> tuple[SweepSpec, str]:
    """(spec, storage URL) from ``SWEEP_DIR`` (its frozen ``spec.yaml`` + ``sweep.json``) or a spec file."""
    path = user_path(target)
    if path.is_dir():
        meta_path, frozen = path / "sweep.json", path / "spec.yaml"
        if not meta_path.is_file() or not frozen.is_file():
            raise ConfigError(f"{path}: not a sweep directory (no sweep.json / spec.yaml); "
                              "give the sweep's directory or its spec file")
        meta = json.loads(meta_path.read_text())
        spec = load_spec(frozen)
        spec.out_dir = path.resolve().parent  # the directory may have moved since the sweep ran
        spec.name = meta.get("name", spec.name)
        return spec, meta["storage"]
    if not path.is_file():
        raise ConfigError(f"{path}: no such sweep directory or spec file")
    spec = load_spec(path)
    meta_path = spec.sweep_dir / "sweep.json"
    url = json.loads(meta_path.read_text())["storage"] if meta_path.is_file() else default_storage_url(spec)
    return spec, url


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
