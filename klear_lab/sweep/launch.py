"""``klear-lab sweep``: check the spec, prepare the study, run workers, compare the arms."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from optuna.trial import TrialState

from klear_lab.console import say
from klear_lab.errors import ConfigError
from klear_lab.hardware import auto_threads
from klear_lab.sweep import launcher
from klear_lab.sweep.checks import check_spec
from klear_lab.sweep.data_checks import check_trial_data, unavailable_trial_inputs
from klear_lab.sweep.grid import Arm, grid_arms
from klear_lab.sweep.identity import check_plugins_unchanged, joined_plugin_files, plugin_files
from klear_lab.sweep.parents import train_parent
from klear_lab.sweep.path_checks import check_sweep_dirs
from klear_lab.sweep.progress import Progress
from klear_lab.sweep.queue import (
    BASE_ATTR,
    CONFIGS,
    READY_ATTR,
    check_same_base,
    count,
    grid_points,
    grid_status,
    missing_points,
    prepare_study,
    trial_count,
)
from klear_lab.sweep.spec import SweepSpec, load_spec, user_path
from klear_lab.sweep.storage import (
    StudyLock,
    current_study,
    default_storage_url,
    open_study,
    redacted,
)
from klear_lab.sweep.successor import superseded_note
from klear_lab.sweep.terminate import SweepTerminated
from klear_lab.sweep.trial import CONFIG_ERROR_ATTR
from klear_lab.sweep.validate_only import report_validated
from klear_lab.sweep.worker import WorkerContext, run_workers, threads_per_trial

JOIN_WAIT_S = 600


def run_sweep(spec_path: str | Path, overrides: list[str] | None = None, *, workers: int | None = None,
              join: bool = False, validate_only: bool = False, wandb_export: bool = False,
              compare: bool = True, name: str | None = None, out_dir: str | Path | None = None,
              log: Any = say) -> int:
    """Run (or resume, or join) the sweep of ``spec_path``; return the exit code.

    Args:
        spec_path: the sweep spec YAML.
        overrides: ``key=value`` applied to the base experiment (after the spec's ``overrides``).
        workers: parallel trials in this process (default: the spec's ``workers``).
        join: add workers to an existing study (any machine sharing its storage); no enqueueing.
        validate_only: run the pre-flight checks and stop.
        wandb_export: write the equivalent W&B sweep config and stop.
        compare: print and save the comparison table when the sweep ends.
        name: study name instead of the spec's (a variant of the same spec, e.g. with overrides).
        out_dir: parent of the sweep directory instead of the spec's ``out_dir``.
        log: one-line progress sink.

    Returns:
        0 when every grid point x seed has a finished (complete or pruned) trial, else 1.
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if validate_only and wandb_export:  # the export wrote its file and nothing was validated (a walkthrough)
        raise ConfigError("--validate-only writes nothing and --wandb-export writes the W&B sweep config: give one "
                          "(both check the spec first)")
    spec = load_spec(spec_path, overrides, name=name, check_base=True)
    if out_dir is not None:
        spec.out_dir = user_path(out_dir)
    if workers is not None:
        if workers < 1:
            raise ConfigError(f"--workers must be >= 1, got {workers}")
        spec.workers = workers
    if not (validate_only or wandb_export):  # its imports overlap the checks, study set-up and parent run
        launcher.warm_up(spec.trial_start, spec.runner)
    arms = grid_arms(spec) if spec.sampler == "grid" else []
    # before the checks that compose trials: a trial's run.name too long for a directory is the sweep name's fault
    check_sweep_dirs(spec, arms, out_dir_flag=out_dir is not None, name_flag=name is not None)
    check_spec(spec, arms)
    url = default_storage_url(spec)
    n_points = trial_count(spec, arms)
    if wandb_export:
        from klear_lab.sweep.wandb_export import relative_note, write_wandb_sweep

        log(f"W&B sweep config: {write_wandb_sweep(spec, spec.sweep_dir / 'wandb_sweep.yaml')} ({relative_note()})")
        return 0
    missing, lacking = unavailable_trial_inputs(spec, arms)
    if missing and not validate_only:
        raise ConfigError(f"{spec.path}: the trials would read data this machine cannot: {'; '.join(missing)}")
    if lacking and not validate_only:
        raise ConfigError(f"{spec.path}: the trials would call rewards this machine cannot run: {'; '.join(lacking)}")
    check_trial_data(spec, arms)  # a bad row fails here, not in every trial reading it
    if validate_only:
        return report_validated(spec, arms, url, n_points, missing, lacking, log)
    study = _wait_for_study(spec, url, arms) if join else open_study(spec, url, create=True)
    lock = StudyLock(url, spec.name)
    base = spec.compose()
    if join:
        check_same_base(study, spec, joining=True)
        frozen = freeze_spec(spec, url)
        log(f"sweep {spec.name}: joining its {n_points} trials, storage {redacted(url)}, dir {spec.sweep_dir}")
    else:
        before = study.study_name
        study, added = prepare_study(study, spec, arms, lock)
        frozen = freeze_spec(spec, url)  # only once the study took the spec: a refused rerun keeps the old one
        if study.study_name != before:
            log(f"sweep {spec.name}: {superseded_note(study)}")
        log(f"sweep {spec.name}: {n_points} trials ({added} enqueued now), storage {redacted(url)}, "
            f"dir {spec.sweep_dir}")
        try:
            train_parent(spec, base, auto_threads(), log)  # every core, at most OMP_NUM_THREADS
        except SweepTerminated as exc:  # passed on to the training: stopped at a checkpoint, or completed meanwhile
            log(f"terminated (SIGTERM): rerun the same command to resume "
                f"({str(exc) or 'the starting point continues from its checkpoint'})")
            return 143
    base_threads = base["trainer"]["num_threads"]
    threads = threads_per_trial(spec.workers, base_threads)
    progress = Progress(n_points, spec.workers, replaces_failures=not arms,
                        points=grid_points(spec, arms) if arms else None)
    files = plugin_files(base)
    if join:  # the study's record of its plugins' code, where this worker reads them from the same paths
        files = joined_plugin_files((study.user_attrs.get(BASE_ATTR) or {}).get(CONFIGS), files)
        check_plugins_unchanged(files, base)  # refused before it takes a trial: each would fail, none be rerun
    ctx = WorkerContext(spec, url, frozen, spec.workers, threads, log=log, progress=progress, plugin_files=files)
    log(f"sweep {spec.name}: {spec.workers} worker(s), {threads or base_threads} torch thread(s) per trial")
    started = time.time()
    try:
        run_workers(ctx)
    except KeyboardInterrupt:  # the workers have stopped and their trial processes are killed
        log("interrupted: rerun the same command to resume")
        return 130
    except SweepTerminated:  # the trials stopped at a checkpoint (or were killed) and their retries are queued
        log(terminated_note(spec, current_study(study), arms))
        return 143  # (also when nothing is left: a scheduler reads it as stopped by its signal)
    study = current_study(study)  # a sweep started alongside may have widened the grid meanwhile
    log(f"sweep {spec.name}: workers done in {time.time() - started:.1f}s; trials {grid_status(study)}")
    if ctx.no_objective:
        raise spec.err("objective.metric", f"{ctx.no_objective}; no further trial was started (their runs would "
                                           f"lack {spec.metric!r} too): make the objective a metric the runs log")
    return _finish(spec, study, arms, compare and not join, log)


def terminated_note(spec: SweepSpec, study: Any, arms: list[Arm]) -> str:
    """What a SIGTERM'd sweep says: rerun it to resume, unless every trial had finished when the signal came (it
    came during the last one, which ended first): then nothing is left to run, and its table is one command away."""
    if arms:
        left = len(missing_points(study, spec, arms))
    else:  # tpe/random: n_trials finished ones
        left = spec.n_trials - count(study, (TrialState.COMPLETE, TrialState.PRUNED))
    if left > 0:
        return ("terminated (SIGTERM): rerun the same command to resume (its stopped trials continue from their "
                "checkpoints)")
    return (f"terminated (SIGTERM) after every trial had finished (trials {grid_status(study)}): nothing is left "
            f"to run; its comparison table: klear-lab compare {spec.sweep_dir}")


def _finish(spec: SweepSpec, study: Any, arms: list[Arm], compare: bool, log: Any) -> int:
    missing = missing_points(study, spec, arms)
    if compare:
        from klear_lab.sweep.compare import compare_study

        compare_study(spec, study)
    if not arms:  # tpe/random: n_trials finished ones
        finished = count(study, (TrialState.COMPLETE, TrialState.PRUNED))
        if finished < spec.n_trials:
            log(f"{finished} of n_trials={spec.n_trials} trials finished; see the trial logs in "
                f"{spec.sweep_dir / 'trials'} and {_next_step(config_failures(study, None), 'run the rest')}")
            return 1
        return 0
    if missing:
        log(f"{len(missing)} grid point(s) without a finished trial: {', '.join(missing[:8])}"
            f"{' ...' if len(missing) > 8 else ''}; see the trial logs in {spec.sweep_dir / 'trials'} "
            f"and {_next_step(config_failures(study, set(missing)), 'retry them')}")
        return 1
    return 0


def config_failures(study: Any, points: set[str] | None) -> list[Any]:
    """The failed trials whose run refused its config, of ``points`` (``"ARM seed=S"``; None: any), the
    latest attempt of each: a rerun of the same command fails those the same way."""
    latest: dict[Any, Any] = {}
    for t in sorted(study.get_trials(deepcopy=False, states=(TrialState.FAIL,)), key=lambda t: t.number):
        point = f"{t.user_attrs.get('arm')} seed={t.user_attrs.get('seed')}"
        if points is None or point in points:
            latest[point if points is not None else t.number] = t
    return [t for t in latest.values() if t.user_attrs.get(CONFIG_ERROR_ATTR)]


def _next_step(failures: list[Any], retry: str) -> str:
    """What to do next: rerun to ``retry``, unless trials failed on their config (a rerun repeats that)."""
    if not failures:
        return f"rerun the same command to {retry}"
    first = failures[0]
    from klear_lab.errors import ComponentError
    from klear_lab.run_list import repeating_error

    error = str(first.user_attrs.get("error", ""))
    component = issubclass(repeating_error(error) or Exception, ComponentError)  # the class run.json's text names
    fix = "the component's code (a plugin's)" if component else "the config"
    why = "a component's error" if component else "a config or data error, or diverged"
    return (f"fix {fix} first: {len(failures)} trial(s) failed on {why}: a rerun would likely repeat (trial "
            f"{first.number}: {error})")


def freeze_spec(spec: SweepSpec, url: str) -> Path:
    """Write ``spec.yaml`` (absolute paths, merged overrides, the storage a spec gave) and ``sweep.json``
    (the storage URL, always). The default storage, ``study.db`` in the sweep directory, is left out of
    ``spec.yaml``: the study goes with the directory, so ``klear-lab sweep DIR/spec.yaml --out-dir NEW``
    continues a sweep moved to NEW, where an absolute URL pointed back at the old place."""
    from klear_lab.config.yaml_io import dump_yaml, load_yaml
    from klear_lab.tracking import atomic_write

    raw = load_yaml(spec.path)  # the config loader: 1e-5 is a number, as load_spec read it
    raw.update({"name": spec.name, "overrides": spec.absolute_overrides(), "storage": url if spec.storage else None,
                "out_dir": str(spec.out_dir.resolve()), "workers": spec.workers})
    if spec.experiment is not None:
        raw["experiment"] = str(spec.experiment.resolve())
    raw["runner"] = spec.runner
    spec.sweep_dir.mkdir(parents=True, exist_ok=True)
    frozen = spec.sweep_dir / "spec.yaml"
    # atomic: every sweep and --join rewrites them while compare, reproduce or a joiner may read them
    atomic_write(frozen, lambda tmp: tmp.write_text(dump_yaml(raw)))
    meta = {"name": spec.name, "storage": url, "spec": str(spec.path.resolve()), "frozen_spec": str(frozen)}
    atomic_write(spec.sweep_dir / "sweep.json", lambda tmp: tmp.write_text(json.dumps(meta, indent=1)))
    return frozen


def _wait_for_study(spec: SweepSpec, url: str, arms: list[Arm]) -> Any:
    """``--join``: wait (up to JOIN_WAIT_S) until the main ``sweep`` process created and filled the study.

    Filled means every grid point of this spec has a trial: a joiner started alongside a main process
    that is widening the grid would otherwise find the old study finished, stop at once and report the
    new points as missing.
    """
    deadline, unqueued, said = time.time() + JOIN_WAIT_S, [], False
    while True:
        try:
            study = current_study(open_study(spec, url, create=False))
            unqueued = missing_points(study, spec, arms, states=None) if spec.sampler == "grid" else []
            if READY_ATTR in study.user_attrs and not unqueued:
                return study
        except ConfigError:
            pass  # not created yet
        if not said:  # (it said nothing for up to 10 minutes)
            said = True
            print(f"--join: waiting up to {JOIN_WAIT_S}s for study {spec.name!r} to be created and filled by "
                  f"`{spec.launch_command()}` (without --join)", file=sys.stderr, flush=True)
        if time.time() > deadline:
            waiting = (f"{len(unqueued)} grid point(s) of the spec have no trial yet ({', '.join(unqueued[:4])})"
                       if unqueued else "not ready")
            raise ConfigError(f"{spec.path}: study {spec.name!r}: {waiting} after {JOIN_WAIT_S}s; start or "
                              f"rerun it with `klear-lab sweep {spec.path}` (without --join)")
        time.sleep(2.0)
