"""Test helpers for sweeps: a tiny experiment, spec writer and fast injectable trial runners.

The runners stand in for ``run_experiment`` in machinery tests (real subprocesses, real
storage, real Optuna): ``val/acc = 100 * optim.lr + seed / 1000``, a metrics CSV in the run
dir, one line per call in ``SWEEP_DIR/invocations.txt`` (lr, seed, pid, sweep pid). A file
``SWEEP_DIR/slow-<lr>-<seed>`` makes the next call for that point announce itself in
``SWEEP_DIR/slow-started`` and hang (to be killed); ``SWEEP_DIR/die-<lr>-<seed>`` makes it
SIGKILL itself (an OOM kill, say); with :func:`run_flaky`, ``SWEEP_DIR/down-<lr>-<seed>`` holding N
makes the next N calls fail as a hub that cannot serve a download does; with :func:`run_editing_plugin`, a file
``SWEEP_DIR/edit-plugin`` makes the next call append a comment to the trial's first plugin file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve()
REPO = HERE.parents[3]
RUNNER = f"{HERE}:run"
PRUNABLE_RUNNER = f"{HERE}:run_prunable"
FAILING_RUNNER = f"{HERE}:run_failing"
REFUSING_RUNNER = f"{HERE}:run_refusing"
DIVERGING_RUNNER = f"{HERE}:run_diverging"
FLAKY_RUNNER = f"{HERE}:run_flaky"
TEMP_RUNNER = f"{HERE}:run_leaving_temp"
EDITING_RUNNER = f"{HERE}:run_editing_plugin"
TINY_PARENT = {  # a starting point (``model.init_from``) that composes fast; the sharing tests fake its runs
    "base": str(REPO / "experiments/quickstart/sft.yaml"),
    "data": {"sources": [{"name": "arith_r1", "n_prompts": 20, "levels": [1], "level_weights": [1.0]}],
             "eval_sources": [{"name": "arith", "levels": [1], "level_weights": [1.0], "n_prompts": 4}]},
}
PARENT_RUN = "parent-20250101-000000-abcdef-s0"  # the name of a faked completed run of it


def write_spec(tmp: Path, name: str = "toy", lrs: tuple[float, ...] = (0.001, 0.002, 0.003),
               seeds: tuple[int, ...] = (0,), **extra: Any) -> Path:
    """A grid spec over ``optim.lr`` x seeds on a tiny SFT experiment, outputs under ``tmp/out``."""
    exp = tmp / "exp.yaml"
    exp.write_text("run: {name: toy, kind: sft}\n")
    body = {"name": name, "experiment": "exp.yaml", "axes": {"optim.lr": list(lrs)}, "seeds": list(seeds),
            "objective": {"metric": "val/acc", "direction": "maximize"}, "metrics": ["train/loss"],
            "runner": RUNNER, "heartbeat_interval": 1, "out_dir": str(tmp / "out"), **extra}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def sweep_cmd(spec: Path, *args: str) -> list[str]:
    """``klear-lab sweep SPEC ARGS`` through the standalone sweep CLI."""
    return [sys.executable, "-m", "klear_lab.cli_sweep", "sweep", str(spec), *args]


def start_sweep(spec: Path, *args: str, sleep: float = 0.3, log: Path | None = None) -> subprocess.Popen:
    """Start a sweep process (fake trials sleep ``sleep`` s); output to ``log``."""
    env = {**os.environ, "KLEAR_FAKE_SLEEP": str(sleep), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - closed with the process
    return subprocess.Popen(sweep_cmd(spec, *args), cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)


def wait_sweep(proc: subprocess.Popen, timeout: float, log: Path) -> int:
    """The sweep process's exit code; killed, with its log's tail, if it runs past ``timeout``."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"sweep did not finish in {timeout}s:\n{log.read_text()[-3000:]}") from None


def invocations(sweep_dir: Path) -> list[tuple[float, int, int, int]]:
    """(lr, seed, pid, sweep process pid) per runner call."""
    path = sweep_dir / "invocations.txt"
    if not path.is_file():
        return []
    rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
    return [(float(a), int(b), int(c), int(d)) for a, b, c, d in rows]


def _point(cfg: dict[str, Any]) -> tuple[Path, float, int]:
    sweep_dir = Path(cfg["run"]["out_dir"]).parent
    return sweep_dir, cfg["optim"]["lr"], cfg["run"]["seed"]


def _record_call(sweep_dir: Path, lr: float, seed: int) -> None:
    fd = os.open(sweep_dir / "invocations.txt", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    sweep_pid = os.environ.get("KLEAR_SWEEP_PID", "-1")  # trials may be forked by the forkserver
    os.write(fd, f"{lr} {seed} {os.getpid()} {sweep_pid}\n".encode())
    os.close(fd)
    marker = sweep_dir / f"slow-{lr}-{seed}"
    if marker.exists():
        marker.unlink()
        (sweep_dir / "slow-started").write_text(str(os.getpid()))
        time.sleep(300)
    marker = sweep_dir / f"die-{lr}-{seed}"
    if marker.exists():
        marker.unlink()
        os.kill(os.getpid(), signal.SIGKILL)


def _run_dir(cfg: dict[str, Any], curve: list[float]) -> Path:
    run_dir = Path(cfg["run"]["out_dir"]) / f"{cfg['run']['name']}-s{cfg['run']['seed']}-{os.getpid()}"
    (run_dir / "csv").mkdir(parents=True)
    rows = ["step,val/acc,train/loss"] + [f"{10 * (i + 1)},{v},{1.0 / (i + 1)}" for i, v in enumerate(curve)]
    (run_dir / "csv" / "metrics.csv").write_text("\n".join(rows) + "\n")
    return run_dir


def run(cfg: dict[str, Any], callbacks: list | None = None) -> dict[str, Any]:
    """Fast stand-in for run_experiment (see the module docstring)."""
    sweep_dir, lr, seed = _point(cfg)
    _record_call(sweep_dir, lr, seed)
    time.sleep(float(os.environ.get("KLEAR_FAKE_SLEEP", "0.3")))
    acc = 100 * lr + seed / 1000
    run_dir = _run_dir(cfg, [acc * f for f in (0.25, 0.5, 0.75, 1.0)])
    return {"run_dir": run_dir, "metrics": {"val/acc": acc, "train/loss": 0.25,
                                            "perf/threads": float(os.environ.get("OMP_NUM_THREADS", 0))}}


_KEPT: list[Any] = []  # temporary directories held to the process's end, as W&B holds a logged table's


def run_leaving_temp(cfg: dict[str, Any], callbacks: list | None = None) -> dict[str, Any]:
    """:func:`run`, after writing a file in a temporary directory that only the process's exit would remove
    (recording where: ``tempdir-<lr>-<seed>`` in the sweep directory)."""
    import tempfile

    sweep_dir, lr, seed = _point(cfg)
    held = tempfile.TemporaryDirectory()
    (Path(held.name) / "samples.table.json").write_text("{}")
    _KEPT.append(held)
    (sweep_dir / f"tempdir-{lr}-{seed}").write_text(held.name)
    (sweep_dir / f"compile-cache-{lr}-{seed}").write_text(os.environ.get("TORCHINDUCTOR_CACHE_DIR", ""))
    return run(cfg, callbacks)


def run_prunable(cfg: dict[str, Any], callbacks: list | None = None) -> dict[str, Any]:
    """Like :func:`run`, but feeds each validation to the callbacks the way Lightning would."""
    from types import SimpleNamespace

    sweep_dir, lr, seed = _point(cfg)
    _record_call(sweep_dir, lr, seed)
    acc = 100 * lr + seed / 1000
    curve = [acc * f for f in (0.25, 0.5, 0.75, 1.0)]
    run_dir = _run_dir(cfg, curve)
    for i, value in enumerate(curve):
        trainer = SimpleNamespace(sanity_checking=False, callback_metrics={"val/acc": value},
                                  global_step=10 * (i + 1))
        for cb in callbacks or []:
            cb.on_validation_end(trainer, None)
    return {"run_dir": run_dir, "metrics": {"val/acc": acc, "train/loss": 0.25}}


def run_failing(cfg: dict[str, Any], callbacks: list | None = None) -> dict[str, Any]:
    """Records the call, then fails the way a crash does (not on its config)."""
    sweep_dir, lr, seed = _point(cfg)
    _record_call(sweep_dir, lr, seed)
    raise RuntimeError(f"lr={lr}: the stand-in runner crashed")


def run_refusing(cfg: dict[str, Any], callbacks: list | None = None) -> dict[str, Any]:
    """Records the call, then refuses the config as ``run_experiment`` does before loading a model."""
    from klear_lab.errors import ConfigError

    sweep_dir, lr, seed = _point(cfg)
    _record_call(sweep_dir, lr, seed)
    raise ConfigError(f"optim.lr={lr}: refused by the stand-in runner")


def run_diverging(cfg: dict[str, Any], callbacks: list | None = None) -> dict[str, Any]:
    """Records the call, then stops as a run whose gradients turned NaN does (``optim.lr`` too high)."""
    from klear_lab.errors import DivergedError

    sweep_dir, lr, seed = _point(cfg)
    _record_call(sweep_dir, lr, seed)
    raise DivergedError(f"training diverged: the gradient norm is nan at step 3 (lr={lr})")


def run_flaky(cfg: dict[str, Any], callbacks: list | None = None) -> dict[str, Any]:
    """:func:`run`, failing with a ``TransientError`` while ``down-<lr>-<seed>`` counts calls down."""
    from klear_lab.errors import TransientError

    sweep_dir, lr, seed = _point(cfg)
    marker = sweep_dir / f"down-{lr}-{seed}"
    left = int(marker.read_text()) if marker.exists() else 0
    if left:
        _record_call(sweep_dir, lr, seed)
        marker.write_text(str(left - 1))
        raise TransientError(f"model.name_or_path: cannot download (ConnectError: lr={lr}); a network problem")
    return run(cfg, callbacks)


def run_editing_plugin(cfg: dict[str, Any], callbacks: list | None = None) -> dict[str, Any]:
    """:func:`run`, then, once ``edit-plugin`` exists in the sweep directory, an edit of the first plugin file the
    trial lists (a researcher saving a change while the sweep runs); the marker is removed."""
    sweep_dir, _, _ = _point(cfg)
    out = run(cfg, callbacks)
    marker = sweep_dir / "edit-plugin"
    if marker.exists():
        marker.unlink()
        with open(cfg["plugins"][0], "a") as plugin:
            plugin.write("# edited while the sweep ran\n")
    return out


def sampled_study(tmp: Path, draws: list[tuple[float, int]], **extra: Any) -> tuple[Any, Any]:
    """(spec, in-memory study) of a random sweep over discrete ``optim.lr`` choices 0.001-0.003, one COMPLETE
    trial per (lr, seed) of ``draws``; ``extra``: more spec keys (``baseline=...``)."""
    import optuna

    from klear_lab.sweep.grid import arm_label, point_key
    from klear_lab.sweep.spec import load_spec

    lrs = [0.001, 0.002, 0.003]
    spec = load_spec(write_spec(tmp, sampler="random", n_trials=len(draws), lrs=tuple(lrs), **extra))
    study = optuna.create_study(direction="maximize")
    dist = {"optim.lr": optuna.distributions.CategoricalDistribution(lrs)}
    for lr, seed in draws:
        attrs = {"arm": arm_label(spec.axes, {"optim.lr": lr}), "seed": seed,
                 "point": point_key({"optim.lr": lr}, seed), "metrics": {"val/acc": 100 * lr + seed / 1000}}
        study.add_trial(optuna.trial.create_trial(params={"optim.lr": lr}, distributions=dist,
                                                  value=attrs["metrics"]["val/acc"], user_attrs=attrs))
    return spec, study
