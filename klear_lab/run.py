"""The one entry point: ``run_experiment(cfg)`` serves the CLI, sweeps and tests."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import socket
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from klear_lab import loggers, tracking
from klear_lab.attempts import saved_identity, warn_if_elsewhere
from klear_lab.distributed import (
    clear_rank_failures,
    env_restored,
    exported_run_dir,
    joined_run_dir,
    rank_failures,
    record_rank_failure,
)
from klear_lab.errors import INTERRUPTED, ConfigError, interrupted
from klear_lab.git_state import save_code_diff
from klear_lab.plugins import load_plugins
from klear_lab.resume import (
    Resumable,
    check_resumable,
    check_run_dir,
    check_same_data,
    checkpoint_path,
    resumable_twins,
    set_aside_later_rows,
)
from klear_lab.run_owner import running_process

# Lightning's WandbLogger sets WANDB_MODE=dryrun in this process for an offline run: put back after each
# run, so a later run in the process (a notebook, a test) reads the user's environment, not it
RUN_SET_ENV = ("WANDB_MODE",)


@dataclass
class RunResult:
    """What a finished run leaves behind.

    Attributes:
        run_dir: the run directory (config.yaml, csv/metrics.csv, summary.json, checkpoints, wandb/).
        metrics: final metrics (``val/acc``, ``train/loss``, ``perf/tokens_per_s``...), also in summary.json.
        wandb_dir: the W&B run directory (offline runs: ``wandb sync`` it later), or None if disabled.
        sigterm_held: a SIGTERM came after training and was held back until the run was recorded
            (:mod:`klear_lab.sigterm`): a caller running more should stop, as for a preemption.
    """

    run_dir: Path
    metrics: dict[str, float] = field(default_factory=dict)
    wandb_dir: Path | None = None
    sigterm_held: bool = False


def run_experiment(cfg: dict[str, Any], *, callbacks: list | None = None,
                   resume: str | Path | None = None, hold_start: bool = False) -> RunResult:
    """Run one experiment from a resolved config (``klear_lab.config.compose.compose``).

    Everything that can fail on bad input (data files, rows, component values) is built before
    the run directory exists; a failure after that marks ``run.json`` as failed and writes no
    ``summary.json``, so no failed run looks complete.

    Args:
        cfg: the fully resolved, validated config (plain dict).
        callbacks: extra Lightning callbacks (sweeps pass Optuna's pruning callback).
        resume: a stopped run's directory to continue in (its ``checkpoints/last.ckpt``); ``cfg`` must
            be its saved config (:func:`klear_lab.resume.resume_config` checks both).
        hold_start: hold the lock of this config and seed as a starting point while the run runs, where it
            is free (``start_sharing.train_holds``), so runs and sweeps starting from it wait and use its run
            (``klear-lab train`` and ``resume``; not sweep trials, whose sweep shares its own way).
    """
    check_composed(cfg)
    load_plugins(cfg.get("plugins") or [], "plugins")  # edited since compose (a notebook): run what is kept
    kind = cfg["run"]["kind"]
    if kind == "sft":
        from klear_lab.stages.sft import prepare_sft as prepare
    elif kind == "rl":
        from klear_lab.stages.rl import prepare_rl as prepare
    elif kind == "eval":
        from klear_lab.stages.eval import prepare_eval as prepare
    else:
        raise ConfigError(f"run.kind must be 'sft', 'rl' or 'eval', got {kind!r}")

    with contextlib.ExitStack() as held:
        resumable = None
        if resume is not None and joined_run_dir() is None:  # one writer per run: a second resume fails here
            held.enter_context(run_lock(Path(resume)))
            resumable = check_resumable(Path(resume), cfg)  # again under the lock; the API and sweeps pass a cfg
        hold = _start_hold(cfg, resume, held) if hold_start and joined_run_dir() is None else None
        return _run(cfg, prepare, callbacks, resume, resumable, hold)


def _start_hold(cfg: dict[str, Any], resume: str | Path | None, held: contextlib.ExitStack) -> Any:
    """Hold ``start_sharing.train_holds`` now, under the config hash a run starting from this one computes
    (its own starting point, if any, looked up as it stands); the function returned holds it again once the
    run has resolved that starting point, when that changed the hash (it trained or chose another)."""
    from klear_lab.start_sharing import train_holds

    runs = None if resume is None else Path(resume).absolute().parent  # "resume ." from inside the run too
    start = cfg["model"]["name_or_path"]
    held.enter_context(train_holds(cfg, runs))
    return lambda: held.enter_context(train_holds(cfg, runs)) if cfg["model"]["name_or_path"] != start else None


def check_composed(cfg: Any) -> None:
    """``cfg`` must be what ``compose`` returns: a plain dict with every section, defaults filled in and
    checked. A notebook's own dict or OmegaConf config failed deep inside with ``KeyError: 'trainer'``."""
    from klear_lab.config.schema import ExperimentConfig

    sections = {f.name for f in dataclasses.fields(ExperimentConfig)}
    if type(cfg) is not dict or not sections <= cfg.keys():
        missing = sorted(sections - set(cfg)) if isinstance(cfg, dict) else []
        raise ConfigError(f"run_experiment takes a composed config, got a {type(cfg).__name__}"
                          + (f" without {', '.join(missing)}" if missing else "") + ": build it with "
                          "klear_lab.config.compose.compose(EXPERIMENT_YAML_OR_MAPPING, ['key=value', ...])")


@contextlib.contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir/.lock`` (an ``flock``, released when the process ends) while a process resumes the run.

    ``run.json`` says running only once the run is built (data, model, engine: minutes at scale); two
    resumes started in that time both passed the check and wrote one run's CSV, checkpoint and W&B id.

    Raises:
        ConfigError: another process holds it.
    """
    check_run_dir(run_dir)
    fd = os.open(run_dir / ".lock", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ConfigError(f"{run_dir}: another process is resuming this run (it holds {run_dir / '.lock'})") from None
    try:
        yield
    finally:
        os.close(fd)


def _run(cfg: dict[str, Any], prepare: Any, callbacks: list | None, resume: str | Path | None,
         resumable: Resumable | None, hold_resolved: Any = None) -> RunResult:
    from klear_lab.sigterm import sigterm_restored
    from klear_lab.stages.common import without_upstream_noise

    ckpt = None if resume is None else checkpoint_path(Path(resume))
    extra = {} if ckpt is None else {"resume": ckpt}
    joined = joined_run_dir()
    if joined is not None:  # a DDP rank > 0 relaunched by Lightning: train in rank 0's run, write nothing
        try:
            stage = prepare(cfg)
            with without_upstream_noise(), env_restored(*RUN_SET_ENV), sigterm_restored(say=False) as held:
                metrics, _ = stage.execute(joined, tracking.identity_of(cfg, joined), callbacks or [], **extra)
        except BaseException as exc:  # but its reason to fail (building too): rank 0 only sees the connection drop
            record_rank_failure(joined, error_line(exc))
            raise
        return RunResult(joined, metrics, None, held.signals > 0)
    if resume is not None:
        warn_if_elsewhere(Path(resume))  # before the data is read: a relative path's error needs this
    from klear_lab.data.file_stats import data_file_stats
    from klear_lab.reward_checks import check_rewards_available

    check_rewards_available(cfg)  # no sandbox for a reward it calls: before any data, model or parent run is built
    # before reading: a file edited meanwhile reads as changed later, not as the same (a resume keeps its first)
    files = data_file_stats(cfg) if resume is None else None
    stage = prepare(cfg)  # may raise ConfigError / DataError: nothing written yet
    if hold_resolved is not None:
        hold_resolved()
    if ckpt is None:
        for twin in resumable_twins(cfg):
            print(f"note: {twin} is an earlier run of this config and seed that stopped at a checkpoint; "
                  f"`klear-lab resume {twin}` continues it (this run starts over)", file=sys.stderr)
        run_dir = tracking.create_run_dir(cfg)
        identity = {**tracking.identity_of(cfg, run_dir), "data": stage.data,
                    **({"data_files": files} if files else {})}
        tracking.write_config(run_dir, cfg)
    else:
        run_dir = Path(resume)
        identity = saved_identity(run_dir)
        check_same_data(run_dir, identity, stage)
        set_aside_later_rows(run_dir, resumable, identity["attempts"] - 1)
        if tracking.saved_config(run_dir) != cfg:  # resumed with overrides (new threads...): what it runs with
            tracking.write_config(run_dir, cfg)
    tracking.write_json(run_dir / "run.json", {**identity, "status": "running", **running_process()})
    save_code_diff(run_dir, identity["git_commits"][-1], identity.get("attempts", 1))  # what +dirty stands for
    clear_rank_failures(run_dir)
    with sigterm_restored() as held:  # a SIGTERM held back after training (hold_sigterm) waits for run.json
        try:
            with without_upstream_noise(), exported_run_dir(run_dir), env_restored(*RUN_SET_ENV):
                metrics, wandb_dir = stage.execute(run_dir, identity, callbacks or [], **extra)
        except BaseException as exc:
            if pruned(exc):  # a sweep's pruner stopped it on purpose: not a crash in run.json or W&B
                tracking.write_json(run_dir / "run.json",
                                    {**identity, "status": "pruned", "error": error_line(exc)})
                loggers.finish_wandb_run(exit_code=0)
                raise
            causes = rank_failures(run_dir)  # another DDP rank failed first: its error is the reason
            error = "; ".join([*causes, f"rank 0: {error_line(exc)}"]) if causes else error_line(exc)
            # host: a model.init_from parent that failed resumes only on the machine that ran it
            tracking.write_json(run_dir / "run.json", {**identity, "status": "failed", "error": error,
                                                       "host": socket.gethostname()})
            loggers.finish_wandb_run(exit_code=1)  # else the next run in this process would log into it
            raise
        tracking.write_json(run_dir / "summary.json", {**metrics, "_identity": identity})
        tracking.write_json(run_dir / "run.json", {**identity, "status": "completed"})
    return RunResult(run_dir, metrics, wandb_dir, held.signals > 0)


def pruned(exc: BaseException) -> bool:
    """Whether ``exc`` is Optuna's ``TrialPruned`` (optuna is imported only by sweeps, so look it up)."""
    optuna = sys.modules.get("optuna")
    return optuna is not None and isinstance(exc, optuna.TrialPruned)


def error_line(exc: BaseException) -> str:
    if type(exc).__name__ == "SIGTERMException":  # Lightning's, raised after the batch a SIGTERM came in
        return "terminated (SIGTERM)"
    if interrupted(exc):
        return INTERRUPTED
    return "".join(traceback.format_exception_only(exc)).strip()
