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


def test_the_check_does_not_read_or_fix_this_processs_wandb_state(tmp_path):
    """After an offline run W&B's process-wide settings stay offline, where ``wandb.login`` answers False
    with a key set; and a check in this process would fix those settings for the runs that follow."""
    code = """
import os, wandb
from wandb.sdk import wandb_setup
from klear_lab.config.compose import compose
from klear_lab.stages.common import check_wandb_login
os.environ["WANDB_MODE"] = "dryrun"  # as Lightning sets it for an offline run
wandb.setup()
os.environ.pop("WANDB_MODE")
check_wandb_login(compose(None, ["run.kind=sft", "tracking.wandb.mode=online"]))
print("ok", wandb_setup.singleton().settings.mode)
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path,
                          env=_env(tmp_path, WANDB_API_KEY="k" * 40, WANDB_SILENT="true"),
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and done.stdout.split() == ["ok", "dryrun"], done.stderr[-2000:]


def test_a_run_says_its_mode_to_wandb_init(tmp_path, monkeypatch):
    """W&B keeps the first run's mode for a process unless ``wandb.init`` is told: each run says its own."""
    from lightning.pytorch.loggers import WandbLogger

    from klear_lab.config.compose import compose
    from klear_lab.loggers import make_loggers
    from klear_lab.tracking import identity_of

    monkeypatch.delenv("WANDB_MODE", raising=False)
    for mode, env, said in [("online", None, "online"), ("offline", None, "offline"),
                            ("online", "offline", "offline"), ("online", "disabled", None)]:
        if env:
            monkeypatch.setenv("WANDB_MODE", env)
        cfg = compose(None, ["run.kind=sft", f"run.out_dir={tmp_path}", f"tracking.wandb.mode={mode}"])
        loggers = [lg for lg in make_loggers(cfg, tmp_path, identity_of(cfg, tmp_path)) if isinstance(lg, WandbLogger)]
        assert [lg._wandb_init["mode"] for lg in loggers] == ([said] if said else []), (mode, env)
        monkeypatch.delenv("WANDB_MODE", raising=False)


def test_wandb_mode_offline_in_the_environment_wins_over_an_online_config(tmp_path, monkeypatch):
    """W&B follows ``WANDB_MODE`` over the config's online mode, so no credentials are needed then."""
    from klear_lab.config.compose import compose
    from klear_lab.stages.common import check_wandb_login

    monkeypatch.setenv("HOME", str(tmp_path))  # no credentials: without the rule this raises
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("NETRC", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    check_wandb_login(compose(None, ["run.kind=sft", "tracking.wandb.mode=online"]))  # no key needed
