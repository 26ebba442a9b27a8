"""The benchmark scripts' shared argument checks (``scripts/bench_args.py``) and the parts of the scripts that
clean up after a failure or a SIGTERM."""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import typing
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def scripts(monkeypatch):
    """Import a script as its siblings do (``scripts/`` on ``sys.path``)."""
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    return importlib.import_module


def refusal(capsys, type_, text: str) -> str:
    """What argparse says of ``--n TEXT`` with ``type_``, after checking it exits 2."""
    parser = argparse.ArgumentParser(prog="bench")
    parser.add_argument("--n", type=type_)
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--n", text])
    assert exit_.value.code == 2
    return capsys.readouterr().err.splitlines()[-1]


def test_at_least_names_the_argument_the_bound_and_the_value(scripts, capsys):
    bench_args = scripts("bench_args")
    assert refusal(capsys, bench_args.positive, "0") == "bench: error: argument --n: must be >= 1, got 0"
    assert refusal(capsys, bench_args.non_negative, "-3") == "bench: error: argument --n: must be >= 0, got -3"
    assert refusal(capsys, bench_args.at_least(2), "1.5") == "bench: error: argument --n: must be an integer, got '1.5'"
    assert bench_args.at_least(2)("2") == 2 and bench_args.non_negative("0") == 0


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "x"])
def test_positive_float_refuses_what_is_not_a_finite_positive_number(scripts, capsys, text):
    assert "error: argument --n: must be" in refusal(capsys, scripts("bench_args").positive_float, text)


def test_positive_float_takes_a_fraction(scripts):
    assert scripts("bench_args").positive_float("0.5") == 0.5


@pytest.mark.parametrize("text", ["", "a,", ",a", "a,,b", "a, ,b"])
def test_comma_list_refuses_empty_items(scripts, capsys, text):
    assert "without empty items" in refusal(capsys, scripts("bench_args").comma_list, text)


def test_comma_list_splits_and_strips(scripts):
    assert scripts("bench_args").comma_list("32-true, bf16-mixed") == ["32-true", "bf16-mixed"]


def test_cpu_count_is_bounded_by_the_usable_cpus(scripts, capsys, monkeypatch):
    bench_args = scripts("bench_args")
    monkeypatch.setattr(bench_args, "usable_cpus", lambda: 2)
    assert bench_args.cpu_count("0") == 0 and bench_args.cpu_count("2") == 2
    assert refusal(capsys, bench_args.cpu_count, "3").endswith("must be <= 2 (the CPUs this process may use), got 3")
    assert refusal(capsys, bench_args.cpu_count, "-1").endswith("must be >= 0, got -1")


def test_usable_cpus_is_the_affinity_mask(scripts):
    assert scripts("bench_args").usable_cpus() == len(os.sched_getaffinity(0))


def test_bench_precision_knows_the_precisions_lightning_takes(scripts):
    from lightning.fabric.connector import _PRECISION_INPUT

    lightning_strings = {str(v) for literal in typing.get_args(_PRECISION_INPUT) for v in typing.get_args(literal)}
    assert set(scripts("bench_precision").PRECISIONS) == lightning_strings


def test_bench_precision_knows_the_tiny_sizes(scripts):
    from klear_lab.models.builders.qwen2 import SIZES

    assert set(scripts("bench_precision").SIZES) == set(SIZES)


def test_a_failed_logp_setting_shows_the_tail_of_its_stderr(scripts, monkeypatch, tmp_path):
    bench = scripts("bench_logp_chunks")
    failing = tmp_path / "child.py"
    failing.write_text("import sys\nprint('x' * 5000, file=sys.stderr)\nsys.exit('CUDA out of memory')\n")
    monkeypatch.setattr(bench, "__file__", str(failing))
    monkeypatch.setattr(sys, "argv", ["bench_logp_chunks.py"])
    with pytest.raises(SystemExit) as exit_:
        bench.measured_in_child("chunks of 8", 8)
    message = str(exit_.value.code)
    assert message.startswith("the chunks of 8 setting failed (exit 1):")
    assert message.endswith("CUDA out of memory\n") and len(message) < 3100


def child_python(code: str) -> subprocess.Popen:
    """A Python child that says ``ready`` once its SIGTERM handling is in place."""
    child = subprocess.Popen([sys.executable, "-c", f"import signal, sys, time\n{code}\nprint('ready', flush=True)\n"
                              "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "ready\n"
    return child


def test_stop_sweep_process_sends_sigterm_first(scripts):
    child = child_python("signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))")
    scripts("bench_sweep_workers").stop_sweep_process(child)
    assert child.returncode == 7  # it ran its SIGTERM handler (a sweep stops its trials there)


def test_stop_sweep_process_kills_one_that_ignores_sigterm(scripts, monkeypatch):
    bench = scripts("bench_sweep_workers")
    monkeypatch.setattr(bench, "STOP_GRACE_S", 0.5)
    child = child_python("signal.signal(signal.SIGTERM, signal.SIG_IGN)")
    start = time.monotonic()
    bench.stop_sweep_process(child)
    assert child.returncode == -signal.SIGKILL and time.monotonic() - start < 10


def processes_with(variable: str, value: str) -> list[int]:
    """Pids of this user's processes whose environment holds ``variable=value``."""
    needle, pids = f"{variable}={value}\0".encode(), []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and needle in (entry / "environ").read_bytes():
                pids.append(int(entry.name))
        except OSError:  # gone meanwhile, or another user's
            continue
    return pids


@pytest.fixture
def short_temp():
    """A short temporary directory for the benchmark's ``TMPDIR``: its sweep's trials bind forkserver sockets under
    it, whose paths may not pass 107 bytes (pytest-xdist's ``tmp_path`` under the tests' own TMPDIR did)."""
    path = Path(tempfile.mkdtemp(prefix="kb-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_sigterm_stops_the_sweep_and_removes_its_temporary_directory(short_temp):
    """Killed with SIGTERM mid-trial, bench_sweep_workers left /tmp/bench-sweep-* (~50 MB) and its processes."""
    tmp_path = short_temp
    env = {**os.environ, "TMPDIR": str(tmp_path), "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    bench = subprocess.Popen([sys.executable, str(REPO / "scripts" / "bench_sweep_workers.py"), "--runner",
                              "synthetic", "--arms", "2", "--steps", "500", "--repeats", "1"], cwd=REPO, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for line in bench.stderr:  # the worker's log lines come on stderr
            if ": started (log " in line:
                break
        assert list(tmp_path.glob("bench-sweep-*")), "no trial started"
        bench.send_signal(signal.SIGTERM)
        rest = bench.communicate(timeout=60)[1]
    finally:
        if bench.poll() is None:
            bench.kill()
    assert bench.returncode == 128 + signal.SIGTERM, rest[-2000:]
    assert "Traceback" not in rest
    assert not list(tmp_path.glob("bench-sweep-*"))
    deadline = time.monotonic() + 10  # the trials' processes go with the sweep process
    while processes_with("TMPDIR", str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not processes_with("TMPDIR", str(tmp_path))
