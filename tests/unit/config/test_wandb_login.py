"""``tracking.wandb.mode=online`` without W&B credentials stops before the run directory exists (it was a
``wandb.errors.UsageError`` traceback from ``wandb.init``, with a failed run directory left behind)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _env(home: Path, **extra: str) -> dict[str, str]:
    """This machine's environment without any W&B credentials: its own HOME, no key, no .netrc."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_") and k not in ("NETRC", "HOME")}
    return {**env, "HOME": str(home), "HF_HUB_OFFLINE": "1", **extra}


def test_online_without_credentials_stops_before_the_run_directory(tmp_path):
    out = tmp_path / "runs"
    done = subprocess.run(
        [sys.executable, "-m", "klear_lab.cli", "train", str(ROOT / "experiments/quickstart/sft.yaml"),
         "tracking.wandb.mode=online", f"run.out_dir={out}"],
        cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "tracking.wandb.mode=online: no W&B API key on this machine" in done.stderr
    assert "Traceback" not in done.stderr and not out.exists()


def test_online_with_a_key_in_the_environment_passes_the_check(tmp_path):
    code = ("from klear_lab.config.compose import compose; from klear_lab.stages.common import check_wandb_login; "
            "check_wandb_login(compose(None, ['run.kind=sft', 'tracking.wandb.mode=online'])); print('ok')")
    # WANDB_SILENT: W&B prints whom it is logged in as, which asks its server (unreachable here)
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path,
                          env=_env(tmp_path, WANDB_API_KEY="k" * 40, WANDB_SILENT="true"),
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
    assert not (tmp_path / ".netrc").exists()  # the key was only read


def test_wandb_mode_offline_in_the_environment_wins_over_an_online_config(tmp_path, monkeypatch):
    """W&B follows ``WANDB_MODE`` over the config's online mode, so no credentials are needed then."""
    from klear_lab.config.compose import compose
    from klear_lab.stages.common import check_wandb_login

    monkeypatch.setenv("HOME", str(tmp_path))  # no credentials: without the rule this raises
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("NETRC", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    check_wandb_login(compose(None, ["run.kind=sft", "tracking.wandb.mode=online"]))  # no key needed
