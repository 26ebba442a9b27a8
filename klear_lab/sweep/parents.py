"""Train a sweep's shared starting point (``model.init_from``) once, on every core, before the workers.

Each trial would train a missing parent itself (under a file lock, so only once), but at
``cores // workers`` threads while the other workers sit blocked on that lock: on 2 cores the
quickstart SFT took about 370 s that way. Trained here first, in its own process with all cores,
the trials then find it by config hash (threads and output dir are not part of the hash).
Skipped when an axis changes the parent, for custom runners, and when there is no ``init_from``.
A starting point another sweep under the same ``out_dir`` already trained with the same config
is linked in instead of retrained (``link_sibling_start``): the embedded RL ablation sweeps all
start from the quickstart SFT model.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from klear_lab.config.compose import compose
from klear_lab.errors import KlearError
from klear_lab.sweep.spec import DEFAULT_RUNNER, SweepSpec

PARENT_KEYS = ("model.init_from", "model.name_or_path")


class ParentRunError(KlearError):
    """The shared starting point could not be trained; no trial was started."""

    exit_code = 1


def needs_parent(spec: SweepSpec, base: dict[str, Any]) -> bool:
    """True when every trial starts from the same ``init_from`` of ``base`` (the composed experiment)."""
    if spec.runner != DEFAULT_RUNNER or any(a.key in PARENT_KEYS for a in spec.axes):
        return False
    return bool(base["model"]["init_from"]) and not base["model"]["name_or_path"]


def train_parent(spec: SweepSpec, base: dict[str, Any], threads: int, log: Any = print) -> None:
    """Train (or find) the parent run in a child process; a failure stops the sweep before any trial."""
    if not needs_parent(spec, base):
        return
    log_path = spec.sweep_dir / "parent.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "klear_lab.sweep.parents", str(spec.experiment), str(spec.runs_dir), str(threads),
           *spec.overrides]
    log(f"sweep {spec.name}: starting point (model.init_from) on {threads} thread(s), log {log_path}")
    started = time.time()
    with open(log_path, "ab") as out:
        offset = out.tell()
        code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode
    if code != 0:
        raise ParentRunError(f"{spec.path}: training the starting point of {spec.experiment} failed "
                          f"(exit {code}); see {log_path}")
    with open(log_path, "rb") as f:
        f.seek(offset)
        reused = [line for line in f.read().decode(errors="replace").splitlines() if " reusing " in line]
    log(f"sweep {spec.name}: {reused[-1] if reused else 'starting point ready'} in {time.time() - started:.1f}s")


def link_sibling_start(cfg: dict[str, Any]) -> Path | None:
    """Link a completed starting point with the same config hash and seed from another sweep under
    the same ``out_dir`` (``sweep_runs/*/runs``) into this sweep's runs dir, so it is not trained again.

    Trials then find it by hash as usual. If the other sweep's directory goes away, the link no
    longer counts as a completed run: the next ``klear-lab sweep`` replaces it or trains its own.
    """
    from klear_lab import builders
    from klear_lab.tracking import config_hash

    runs = Path(cfg["run"]["out_dir"])
    parent = builders.parent_config(cfg)
    wanted = config_hash(parent)
    if builders.find_completed_run(runs, wanted) is not None:
        return None
    found = [run for other in runs.parent.parent.glob("*/runs") if other.resolve() != runs.resolve()
             for run in [builders.find_completed_run(other, wanted)]
             if run is not None and _seed_of(run) == parent["run"]["seed"]]
    if not found:
        return None
    best = max(found, key=lambda p: p.stat().st_mtime)
    runs.mkdir(parents=True, exist_ok=True)
    link = runs / best.name
    if link.is_symlink() and not link.exists():  # left dangling by an earlier, deleted source
        link.unlink()
    with contextlib.suppress(FileExistsError):  # another sweep linked it a moment ago
        link.symlink_to(best.resolve(), target_is_directory=True)
    return best


def _seed_of(run_dir: Path) -> int | None:
    """``run.seed`` of a run directory's saved config (the config hash leaves the seed out)."""
    import yaml

    try:
        return (yaml.safe_load((run_dir / "config.yaml").read_text()) or {}).get("run", {}).get("seed")
    except (OSError, yaml.YAMLError):
        return None


def main(argv: list[str]) -> int:
    """``python -m klear_lab.sweep.parents EXPERIMENT RUNS_DIR THREADS [override ...]``."""
    from klear_lab import builders

    experiment, runs, threads, *overrides = argv
    cfg = compose(experiment, overrides)
    cfg["run"]["out_dir"] = runs
    cfg["trainer"]["num_threads"] = int(threads)  # the parent run takes its threads from here
    reused = link_sibling_start(cfg)
    if reused is not None:
        print(f"starting point: reusing {reused} (same config, trained by another sweep)", flush=True)
    builders.resolve_init_from(cfg)
    print(f"starting point: {cfg['model']['name_or_path']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
