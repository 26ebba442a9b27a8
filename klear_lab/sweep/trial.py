"""One trial in its own process: ``python -m klear_lab.sweep.trial JOB.json``.

The worker that claimed the trial composed its config and wrote the job file (storage URL,
study name, trial id, resolved config, runner, objective). This process loads the study,
builds ``optuna.trial.Trial(study, trial_id)`` for the pruning callback, calls the runner
(default ``klear_lab.run:run_experiment``), stores the outputs as user attrs and tells
Optuna the result: COMPLETE with the objective, PRUNED, or FAIL with the error. If this
process dies (OOM, kill -9), the worker sees the trial still RUNNING and fails it; if the
sweep process dies, this one kills itself (a pidfd watcher) and heartbeats stop. Started fresh
(``main``) or forked from a preloaded server (``forked_main``, see ``launcher.py``).

The runner is injectable (``runner:`` in the spec, ``module:function`` or ``file.py:function``),
so tests and custom launchers can run trials without training a model.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import os
import select
import signal
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from klear_lab.sweep.run_status import mark_pruned

CONFIG_ERROR_ATTR = "config_error"
"""Set on a trial failed by a ``ConfigError`` or ``DataError``: a rerun of the same sweep fails it the same way."""
TRANSIENT_ATTR = "transient_error"
"""Set on a trial failed by a ``TransientError`` (the hub could not serve a download): retried at once."""
NO_OBJECTIVE_ATTR = "objective_missing"
"""Set on a trial whose run finished without the objective: the other trials' runs lack it too."""
TERMINATED = "terminated (SIGTERM)"
"""The error of a trial stopped by SIGTERM (its sweep's, forwarded: ``terminate.py``), as its run records it."""


def job_stem(sweep_dir: Path, number: int) -> Path:
    """Where trial ``number`` of the sweep in ``sweep_dir`` keeps its job file (``.json``, written by the worker
    before the trial starts: its composed config) and log (``.log``)."""
    return sweep_dir / "trials" / f"trial-{number:04d}"


def die_with(sweep_pid: int | None) -> None:
    """SIGKILL this process as soon as the sweep process ``sweep_pid`` exits (kill -9 included).

    A watcher thread blocks on a pidfd of the sweep process, so this holds whether the trial is
    the sweep's child (fresh start) or the forkserver's (preloaded start). Without pidfds (not
    Linux >= 5.3) the heartbeat still fails the trial, and the process may linger.
    """
    if sweep_pid is None or not hasattr(os, "pidfd_open"):
        return
    try:
        fd = os.pidfd_open(sweep_pid)
    except ProcessLookupError:  # the sweep died before this trial started
        os._exit(1)
    except OSError:
        return

    def watch() -> None:
        select.select([fd], [], [])
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="die-with-sweep", daemon=True).start()


def resolve_runner(spec: str) -> Callable[..., Any]:
    """``pkg.module:function`` or ``path/to/file.py:function`` -> the callable."""
    module_name, _, attr = spec.rpartition(":")
    if not module_name or not attr:
        raise ValueError(f"runner {spec!r} must look like module:function or file.py:function")
    if module_name.endswith(".py"):
        path = Path(module_name).resolve()
        mod_spec = importlib.util.spec_from_file_location(f"klear_sweep_runner_{path.stem}", path)
        if mod_spec is None or mod_spec.loader is None:
            raise ValueError(f"runner file {path} cannot be imported")
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    return getattr(module, attr)


def result_fields(result: Any) -> tuple[dict[str, float], str | None, str | None]:
    """(metrics, run_dir, wandb_dir) from a RunResult or a plain mapping with those keys."""
    get = result.get if isinstance(result, dict) else lambda k, d=None: getattr(result, k, d)
    metrics = {str(k): float(v) for k, v in (get("metrics") or {}).items() if _is_number(v)}
    run_dir, wandb_dir = get("run_dir"), get("wandb_dir")
    return metrics, str(run_dir) if run_dir else None, str(wandb_dir) if wandb_dir else None


def fill_from_csv(metrics: dict[str, float], run_dir: str | None, names: list[str]) -> list[str]:
    """Metrics the run logged but did not return: their last value in the run's metrics.csv."""
    missing = [n for n in names if n not in metrics]
    if not missing or not run_dir:
        return []
    from klear_lab.sweep.curves import read_curve

    filled = []
    for name in missing:
        curve = read_curve(run_dir, name)
        if curve is not None and len(curve):
            metrics[name] = float(curve.iloc[-1])
            filled.append(name)
    return filled


def run_job(job: dict[str, Any]) -> int:
    """Execute one trial job; return the process exit code (0 complete/pruned, 1 failed)."""
    import optuna

    from klear_lab.distributed import joined_run_dir
    from klear_lab.plugins import load_plugins
    from klear_lab.sweep.storage import make_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = make_storage(job["storage"])  # the worker records heartbeats, not this process
    study = optuna.load_study(study_name=job["study"], storage=storage, pruner=_pruner(job))
    trial = optuna.trial.Trial(study, job["trial_id"])
    cfg = job["config"]
    callbacks = _callbacks(trial, job)
    if joined_run_dir() is not None:  # a DDP rank > 0 of a multi-device trial: train; rank 0 reports to Optuna
        load_plugins(cfg.get("plugins") or [])  # the pruning callback too: its broadcasts pair with rank 0's
        resolve_runner(job["runner"])(cfg, callbacks=callbacks, **_resume(job))
        return 0
    result = None
    try:
        load_plugins(cfg.get("plugins") or [])
        result = run_or_start_over(job, cfg, callbacks)
        for cb in callbacks:  # under DDP the pruning decision surfaces only here
            getattr(cb, "check_pruned", lambda: None)()
    except optuna.TrialPruned as exc:
        if result is not None:  # DDP: the run stopped early and recorded itself completed before this
            mark_pruned(result_fields(result)[1], str(exc))
        trial.set_user_attr("pruned", str(exc))
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        print(f"trial {trial.number}: pruned ({exc})", flush=True)
        return 0
    except SystemExit as exc:
        if type(exc).__name__ != "SIGTERMException":  # Lightning's, after the step a SIGTERM came in (checkpointed)
            raise
        _fail(study, trial, TERMINATED)  # (uncaught, it exited 0 and left the trial RUNNING)
        return 143
    except Exception as exc:  # noqa: BLE001 - any failure fails this trial only
        from klear_lab.errors import REPEATING_ERRORS, TransientError

        traceback.print_exc()
        if isinstance(exc, REPEATING_ERRORS):  # the same config or data fails alike again
            trial.set_user_attr(CONFIG_ERROR_ATTR, True)
        if isinstance(exc, TransientError):
            trial.set_user_attr(TRANSIENT_ATTR, True)
        return _fail(study, trial, f"{type(exc).__name__}: {exc}")
    metrics, run_dir, wandb_dir = result_fields(result)
    filled = fill_from_csv(metrics, run_dir, [job["objective"], *job.get("metrics", [])])
    if filled:
        trial.set_user_attr("metrics_from_csv", filled)
    for key, value in (("metrics", metrics), ("run_dir", run_dir), ("wandb_dir", wandb_dir)):
        trial.set_user_attr(key, value)
    value = metrics.get(job["objective"])
    if value is None or math.isnan(value):
        if value is None:  # NaN: this run diverged, which says nothing of the others
            trial.set_user_attr(NO_OBJECTIVE_ATTR, True)
        return _fail(study, trial, f"objective {job['objective']!r} missing from the run's metrics "
                                   f"(got {', '.join(sorted(metrics)) or 'none'})")
    study.tell(trial, value)
    print(f"trial {trial.number}: {job['objective']}={value:.6g} run_dir={run_dir}", flush=True)
    return 0


def _fail(study: Any, trial: Any, message: str) -> int:
    import optuna

    trial.set_user_attr("error", message[-2000:])
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    print(f"trial {trial.number}: failed: {message}", file=sys.stderr, flush=True)
    return 1


def _pruner(job: dict[str, Any]) -> Any:
    from klear_lab.sweep.storage import make_pruner

    return make_pruner(job.get("pruner", "none"), job.get("pruner_startup", 1))


def _callbacks(trial: Any, job: dict[str, Any]) -> list[Any]:
    from klear_lab.sweep.record import RecordRunDir

    out: list[Any] = [RecordRunDir(trial)]  # a retry of this trial resumes that run
    if job.get("pruner", "none") != "none":
        from klear_lab.sweep.pruning import StepPruningCallback

        out.append(StepPruningCallback(trial, monitor=job["objective"]))
    return out


def run_or_start_over(job: dict[str, Any], cfg: dict[str, Any], callbacks: list) -> Any:
    """The runner on ``cfg``, continuing the killed run ``job`` names; when that run's data changed since it
    started (``DataChangedError``, raised before anything is written), the trial starts over in a new run:
    a rerun would otherwise pick the same killed run, and be refused, every time."""
    from klear_lab.resume import DataChangedError

    runner = resolve_runner(job["runner"])
    try:
        return runner(cfg, callbacks=callbacks, **_resume(job))
    except DataChangedError as exc:
        print(f"trial {job.get('number', '?')}: not continuing {job['resume']} ({exc}); starting over in a new run",
              flush=True)
        return runner(cfg, callbacks=callbacks)


def _resume(job: dict[str, Any]) -> dict[str, Any]:
    """``resume=RUN_DIR`` for a retried trial whose killed predecessor left a checkpoint (see the worker)."""
    return {"resume": job["resume"]} if job.get("resume") else {}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def main(argv: list[str] | None = None) -> int:
    """Entry point of a fresh trial process (``python -m klear_lab.sweep.trial JOB.json``)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m klear_lab.sweep.trial JOB.json", file=sys.stderr)
        return 2
    job = json.loads(Path(argv[0]).read_text())
    progress_bars_without_a_semaphore()
    sweep_pid = os.environ.get("KLEAR_SWEEP_PID", "")
    die_with(int(sweep_pid) if sweep_pid.isdigit() else None)
    return run_job(job)


def progress_bars_without_a_semaphore() -> None:
    """tqdm's default write lock (Lightning's progress bars) holds a multiprocessing semaphore, which the
    sweep's resource tracker registers. A trial the sweep SIGKILLs (Ctrl-C) never unregisters it, and the
    sweep's exit printed "resource_tracker: There appear to be 1 leaked semaphore objects to clean up at
    shutdown" under the user's Ctrl-C. One process writes a trial's bars: a thread lock is enough."""
    import threading

    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())


SERVER_BLOCKED = {signal.SIGTERM, signal.SIGINT}
"""Signals blocked in the preloaded trial server (``launcher.sigterm_blocked``), unblocked in each trial."""


def forked_main(job_path: str, log_path: str, env: dict[str, str], cwd: str) -> None:
    """Entry point of a trial forked from the preloaded server (see ``launcher.py``).

    Becomes what a fresh trial would be: output to the trial log, the worker's environment and
    working directory (also on ``sys.path``), torch threads from ``OMP_NUM_THREADS`` (torch was
    imported before the environment changed, so its default would be the server's).
    """
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SERVER_BLOCKED)  # the server's block (launcher.sigterm_blocked)
    _redirect_output(log_path)
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None  # the server's, cached: found again from the trial's own TMPDIR
    os.chdir(cwd)
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    sys.argv = [__file__, job_path]
    if "torch" in sys.modules and env.get("OMP_NUM_THREADS", "").isdigit():
        sys.modules["torch"].set_num_threads(int(env["OMP_NUM_THREADS"]))
    sys.exit(main([job_path]))


def _redirect_output(log_path: str) -> None:
    """stdout and stderr (file descriptors 1 and 2, and Python's streams) -> ``log_path``, line-buffered."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    for name, number in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name)
        if stream is None:
            setattr(sys, name, open(number, "w", buffering=1, closefd=False))  # noqa: SIM115 - process-long
        else:
            stream.reconfigure(line_buffering=True)


if __name__ == "__main__":
    sys.exit(main())
