"""A SIGTERM after a run completed (while the command reports and the interpreter exits) exited 143."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from klear_lab.cli import main

ROOT = Path(__file__).resolve().parents[2]
SFT = str(ROOT / "experiments" / "quickstart" / "sft.yaml")

# the klear-lab command, with a SIGTERM once the run is done: while it prints the result, and again at exit
SIGTERM_AFTER_THE_RUN = """
import atexit, os, signal, sys
from klear_lab import cli

report = cli.print_result

def report_after_a_sigterm(result):
    os.kill(os.getpid(), signal.SIGTERM)
    report(result)

cli.print_result = report_after_a_sigterm
atexit.register(os.kill, os.getpid(), signal.SIGTERM)
sys.argv = ["klear-lab", *sys.argv[1:]]
cli.entry()
"""


def test_a_sigterm_after_the_run_completed_exits_0(tmp_path, tiny_sft_overrides):
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "KLEAR_RUN_DIR", "WANDB_SERVICE")}
    done = subprocess.run([sys.executable, "-c", SIGTERM_AFTER_THE_RUN, "train", SFT, *tiny_sft_overrides,
                           "tracking.wandb.enabled=false"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]  # was -15: the default handler, 143 from a shell
    assert "run finished" in done.stdout  # the report went on after the signal
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"


def test_main_gives_the_sigterm_handler_back(tiny_sft_overrides):
    """In a notebook or a test, ``main()`` leaves the process's SIGTERM handling as it found it."""
    def own_handler(signum, frame):  # noqa: ANN001 - signal's hook
        raise AssertionError("not called")

    before = signal.signal(signal.SIGTERM, own_handler)
    try:
        assert main(["train", SFT, *tiny_sft_overrides, "tracking.wandb.enabled=false"]) == 0
        assert signal.getsignal(signal.SIGTERM) is own_handler
    finally:
        signal.signal(signal.SIGTERM, before)


def test_after_a_failed_command_sigterm_still_ends_the_process(tmp_path):
    """Only a completed run's exit ignores SIGTERM: ``timeout`` must still stop any other command's hung exit."""
    script = ("import atexit, os, signal, sys\nfrom klear_lab import cli\n"
              "atexit.register(os.kill, os.getpid(), signal.SIGTERM)\n"
              "sys.argv = ['klear-lab', 'train', sys.argv[1]]\ncli.entry()\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "missing.yaml")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGTERM, done.stderr[-2000:]
    assert "missing.yaml" in done.stderr  # the command's own error came first
