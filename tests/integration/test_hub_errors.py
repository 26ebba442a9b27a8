"""A model or dataset the hub cannot serve right now is not a config error: a sweep reruns the trial.

The hub is a local HTTP server here (``HF_ENDPOINT``); ``klear-lab train`` runs as a real subprocess.
"""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from klear_lab.errors import OFFLINE_VARS, ConfigError, DataError, TransientError, load_error, network_cause

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def hub():
    """A hub that answers every request with the status in ``hub.status`` (and Retry-After: 0)."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(server.status)
            self.send_header("Retry-After", "0")  # huggingface_hub's retries then wait 1 s, not up to 8 s
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_HEAD = do_GET

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.status = 503
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def _train(server, tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in OFFLINE_VARS}
    env |= {"HF_ENDPOINT": f"http://127.0.0.1:{server.server_port}", "HF_HOME": str(tmp_path / "hf"),
            "WANDB_MODE": "offline"}
    cmd = [sys.executable, "-m", "klear_lab.cli", "train", str(ROOT / "experiments/quickstart/sft.yaml"),
           f"run.out_dir={tmp_path / 'runs'}", *overrides]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def test_a_hub_that_is_down_exits_75_and_a_missing_repo_exits_2(hub, tmp_path):
    """A 503 was reported as "config error" (exit 2), and a sweep never reran the trial."""
    down = _train(hub, tmp_path, "model.name_or_path=someorg/somemodel")
    assert down.returncode == 75, down.stderr[-2000:]
    assert "model.name_or_path 'someorg/somemodel': cannot load: cannot download (HfHubHTTPError" in down.stderr
    assert "503" in down.stderr and "retry" in down.stderr
    hub.status = 404
    missing = _train(hub, tmp_path, "model.name_or_path=someorg/somemodel")
    assert missing.returncode == 2, missing.stderr[-2000:]
    assert "model.name_or_path 'someorg/somemodel': cannot load:" in missing.stderr
    assert "cannot download" not in missing.stderr
    hub.status = 503
    (tmp_path / "runs" / "quickstart-sft-abc").mkdir(parents=True)  # a run directory, mistyped below
    typo = _train(hub, tmp_path, f"model.name_or_path={tmp_path}/runs/quickstart-sft-abd")
    assert typo.returncode == 2, typo.stderr[-2000:]  # was 75 after 55 s of retries as a hub id
    assert f"'{tmp_path}/runs/quickstart-sft-abd': no such directory; did you mean " \
           f"{tmp_path}/runs/quickstart-sft-abc?" in typo.stderr


def _chain(*excs: BaseException) -> BaseException:
    """``excs[0]`` raised while handling ``excs[1]``, raised while handling ``excs[2]``..."""
    for outer, inner in zip(excs, excs[1:], strict=False):
        outer.__context__ = inner
    return excs[0]


def test_network_cause_reads_the_chain_as_transformers_raises_it(monkeypatch):
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    for name in OFFLINE_VARS:
        monkeypatch.delenv(name, raising=False)

    refused = _chain(OSError("We couldn't connect to the hub"), LocalEntryNotFoundError("not cached"),
                     ConnectionRefusedError(111, "Connection refused"))
    assert isinstance(network_cause(refused), ConnectionRefusedError)
    offline = _chain(OSError("not cached"), LocalEntryNotFoundError("not cached"), OfflineModeIsEnabled("offline"))
    assert network_cause(offline) is None  # offline without the files: the config's problem
    assert network_cause(_chain(OSError("no such repo"), ValueError("404"))) is None
    err = load_error("data", refused, DataError)
    assert isinstance(err, TransientError) and not isinstance(err, ConfigError) and err.exit_code == 75
    assert str(err).startswith("data: cannot download (ConnectionRefusedError:")
    assert type(load_error("data", offline, DataError)) is DataError


def test_not_network_failures_and_bare_client_errors(monkeypatch):
    """Name matching took a corrupt archive, a cache lock's timeout or a child's timeout for the network and
    missed a proxy; a raw client error (what escapes transformers mid-download) left the load unclassified
    (exit 1, no sweep retry); an empty message crashed the error itself."""
    import subprocess as sp
    import tarfile

    import filelock
    import httpx2

    from klear_lab.build_model import model_load_error

    for name in OFFLINE_VARS:
        monkeypatch.delenv(name, raising=False)
    for exc in (tarfile.ReadError("bad archive"), filelock.Timeout("lock"), sp.TimeoutExpired("x", 1),
                BrokenPipeError(), FileNotFoundError("config.json")):
        assert network_cause(exc) is None, exc
    for exc in (httpx2.ProxyError("proxy"), httpx2.ReadError(""), TimeoutError(), ConnectionResetError()):
        assert network_cause(exc) is exc, exc
    err = model_load_error("org/model", "org/model", _chain(httpx2.ReadError(""), ConnectionResetError()))
    assert isinstance(err, TransientError) and "cannot load: cannot download (ReadError: )" in str(err)
    assert type(model_load_error("org/model", "org/model", ValueError("flash_attention_2"))) is ConfigError
    bug = RuntimeError("a bug in our code")
    assert model_load_error("org/model", "org/model", bug) is bug  # not the user's error: raised as it is
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    assert network_cause(ConnectionError("Couldn't reach 'org/ds' on the Hub")) is None


def test_a_dataset_in_offline_mode_is_a_data_error_not_a_network_one(tmp_path):
    """datasets raises a plain ConnectionError in offline mode (the cause cut off), taken for the network."""
    code = ("import datasets\nfrom klear_lab.errors import network_cause\n"
            "try:\n    datasets.load_dataset('someorg/someds')\n"
            "except Exception as exc:\n    print(type(exc).__name__, network_cause(exc) is None)\n")
    env = {k: v for k, v in os.environ.items() if k not in OFFLINE_VARS}
    env |= {"HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.split()[-1:] == ["True"], out.stdout + out.stderr[-2000:]
