"""``klear-lab resume RUN_DIR``: continue a stopped SFT or RL run in its own directory and W&B run.

A run killed, preempted or crashed after writing ``checkpoints/last.ckpt`` (``trainer.checkpoint_every``)
continues from it: the saved resolved config is composed again (it must hash to the one in
``run.json``), Lightning restores weights, optimizer, scheduler and loop progress, and
:mod:`klear_lab.checkpointing` the data position and RNG, so the remaining steps are the ones the run
would have taken. The W&B run id is the same (``resume="allow"``). Rows that ``csv/metrics.csv`` got
after the checkpoint (steps that will run again) are set aside in ``csv/metrics.before-resume-N.csv``.
"""

from __future__ import annotations

import csv
import glob
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from klear_lab.errors import ConfigError
from klear_lab.modules.eval_step import is_evaluation_row
from klear_lab.resume_checkpoint import changes_since_start, checkpoint_marks
from klear_lab.run_owner import still_running
from klear_lab.tracking import atomic_write, config_hash, csv_table

# What a resume may change: how the run executes and reports, never what it computes.
RESUME_OVERRIDABLE = ("trainer.num_threads", "trainer.checkpoint_every", "rl.logp_chunk_tokens")


def resume_config(run_dir: str | Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """The saved config of a run that can be resumed, with ``overrides`` (``key=value``) of the keys in
    :data:`RESUME_OVERRIDABLE` (e.g. more threads on a bigger machine). Not the W&B mode: the resumed
    W&B run leaves out what earlier attempts' run files hold, which an offline file has not uploaded.

    Raises:
        ConfigError: not a run directory, an eval run, a completed run, a run still running on this
            machine, no checkpoint or one that cannot be loaded, a saved config that no longer composes to
            the same config, or an override of another key.
    """
    from klear_lab.config.compose import compose
    from klear_lab.config.layers import check_override_form, override_key
    run_dir = Path(run_dir)
    saved = run_dir / "config.yaml"
    stopped_record(run_dir)  # before composing: a completed run says so, whatever the overrides
    for item in overrides or []:
        check_override_form(item, f"resume {run_dir}")
        key = override_key(item)
        if key not in RESUME_OVERRIDABLE:
            compose(saved, [item])  # an unknown key or bad value says so, rather than a `train` that fails on it
            raise ConfigError(f"resume {run_dir}: {item!r}: a resumed run keeps its config; only "
                              f"{', '.join(RESUME_OVERRIDABLE)} may change (to change anything else, start a "
                              f"new run: klear-lab train {saved} {item}){_moved_file_hint(run_dir, saved, key)}")
    cfg = compose(saved, overrides)
    check_resumable(run_dir, cfg)
    return cfg


def _moved_file_hint(run_dir: Path, saved: Path, key: str) -> str:
    """For a data file's path given anew (the file was moved): how the resume reads it without a new path."""
    if not (key.startswith("data.") and key.rsplit(".", 1)[-1] in ("path", "eval_path")):
        return ""
    from omegaconf import OmegaConf

    from klear_lab.run_advice import put_back

    old = OmegaConf.select(OmegaConf.load(saved), key)
    if not isinstance(old, str) or not old:  # a hub id's is conditional ("if the file was moved") as it is
        return ""
    advice = put_back(run_dir, [old])
    return f". If the file was moved: {advice[0].lower()}{advice[1:]}"


def resume_command_config(run_dir: str | Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """:func:`resume_config` for ``klear-lab resume``, which is also told how to go on when a data file its config
    names was moved (``run_advice.check_data_files_here``; a ``DataError``). Not for the sweeps' and starting
    points' own checks of a resumable run, which catch only ``ConfigError``."""
    from klear_lab.run_advice import check_data_files_here

    cfg = resume_config(run_dir, overrides)
    check_data_files_here(Path(run_dir), cfg)
    return cfg


def read_record(record: Path) -> dict[str, Any]:
    """A run's ``run.json`` as a dict; a damaged one (cut short by a full disk, edited by hand) names the file
    instead of ending ``klear-lab resume`` with a JSON traceback.

    Raises:
        ConfigError: not readable, not JSON, or not a JSON object.
    """
    try:
        identity = json.loads(record.read_text())
    except (OSError, ValueError) as exc:  # ValueError: JSONDecodeError and undecodable bytes
        raise ConfigError(f"{record}: cannot read the run's record ({exc}); it cannot be resumed") from None
    if not isinstance(identity, dict):
        raise ConfigError(f"{record}: the run's record is a JSON {type(identity).__name__}, not an object; "
                          "it cannot be resumed")
    return identity


@dataclass(frozen=True)
class Resumable:
    """What :func:`check_resumable` read of a run that can continue, handed on so the resume reads each once.

    Attributes:
        log_step: the logging step of the batch that wrote the checkpoint (:func:`checkpoint_log_step`).
        logged: ``csv/metrics.csv``'s header and whole rows, or None when the run logged none.
        eval_after: the run logs an evaluation at the updates done, one step past its update's training
            row (:mod:`klear_lab.modules.eval_step`); False for a checkpoint of an older version, which
            logged it at the training row's step (an evaluation row one past is the next update's).
    """

    log_step: int
    logged: tuple[list[str], list[dict[str, str]]] | None
    eval_after: bool = True


def check_resumable(run_dir: Path, cfg: dict[str, Any]) -> Resumable:
    """Refuse to continue ``run_dir`` with ``cfg`` unless the run can continue and ``cfg`` is its config
    (``run_experiment(cfg, resume=...)`` from the API or a sweep, as well as ``klear-lab resume``).

    Raises:
        ConfigError: an eval run, a completed run, one still running on this machine, another config,
            a ``run.json`` without what a run writes, no checkpoint or one that cannot be loaded, a
            ``csv/metrics.csv`` that cannot be read.
    """
    import yaml

    from klear_lab.distributed import joined_run_dir  # a DDP rank > 0 of this resume: rank 0 is alive

    saved, record = run_dir / "config.yaml", run_dir / "run.json"
    identity = stopped_record(run_dir, cfg)
    if identity["status"] == "running" and joined_run_dir() is None and still_running(identity):
        raise ConfigError(f"{record}: the run is still running (pid {identity['pid']} on this machine); "
                          "stop it before resuming, or two processes would write one run")
    written = yaml.safe_load(saved.read_text()) or {}
    seed = (written.get("run") or {}).get("seed")
    if seed is not None and cfg["run"]["seed"] != seed:
        raise ConfigError(f"{saved}: the run started with run.seed={seed}, the config to resume with has "
                          f"{cfg['run']['seed']}: not the same run")
    resolved = as_resolved(cfg, written.get("model") or {})
    got = config_hash(resolved)
    if got != identity["config_hash"]:
        changes = changes_since_start(checkpoint_path(run_dir), resolved, identity["config_hash"])
        why = (f"changed since it started: {changes}" if changes else "a setting, a default, or a plugin's code "
               f"differs; {run_dir / 'plugins'} keeps the plugins' code the run started with")
        raise ConfigError(f"{saved}: the config to resume with hashes to {got}, but the run started with "
                          f"{identity['config_hash']} ({why}): not the same run")
    if not checkpoint_path(run_dir).is_file():
        raise ConfigError(f"{checkpoint_path(run_dir)}: no checkpoint to resume from (the run stopped before "
                          f"its first trainer.checkpoint_every={cfg['trainer']['checkpoint_every']} steps, or "
                          "trainer.checkpoint was false)")
    step, eval_after = checkpoint_marks(checkpoint_path(run_dir))  # one that cannot load: refused here
    return Resumable(step, logged_rows(run_dir), eval_after)


def check_run_dir(run_dir: Path) -> None:
    """Raises ConfigError unless ``run_dir`` holds a run's ``config.yaml`` and ``run.json``."""
    if not run_dir.exists():
        raise ConfigError(f"{run_dir}: no such directory (klear-lab runs lists the runs under an output directory)")
    missing = [name for name in ("config.yaml", "run.json") if not (run_dir / name).is_file()]
    if len(missing) == 2:
        raise ConfigError(f"{run_dir}: not a run directory (needs config.yaml and run.json)")
    if missing:  # a run that lost one: say which, not "not a run" of a directory `runs` lists as one
        raise ConfigError(f"{run_dir}: {missing[0]} is missing (a run directory needs config.yaml and run.json; "
                          "without its own config the run cannot be resumed as it started)")


def stopped_record(run_dir: Path, cfg: dict[str, Any] | None = None) -> dict[str, Any]:
    """``run_dir``'s ``run.json`` once it is a stopped sft or rl run's record: what :func:`resume_config` checks
    before composing the config, and :func:`check_resumable` first. ``cfg``, the config to resume with, has
    its kind checked before the record's status (a completed eval run is told to run the evaluation again).

    Raises:
        ConfigError: not a run directory, a damaged or hand-edited ``run.json`` (:func:`read_record`,
            :func:`check_record`), a completed run, or a ``cfg`` of another kind.
    """
    check_run_dir(run_dir)
    record = run_dir / "run.json"
    identity = read_record(record)
    if cfg is not None and cfg["run"]["kind"] not in ("sft", "rl"):
        raise ConfigError(f"{run_dir / 'config.yaml'}: run.kind is {cfg['run']['kind']!r}; only sft and rl runs "
                          "resume (run the evaluation again instead)")
    check_record(record, identity)
    return identity


RESUMABLE_STATUSES = ("running", "failed", "pruned")  # running: its process died (checked apart)


def check_record(record: Path, identity: dict[str, Any]) -> None:
    """Raises ConfigError unless ``run.json`` holds what a stopped run's record holds: a hand-edited one
    (an unknown status, a missing hash, ``attempts: "two"``) resumed as a stopped run or ended in a traceback."""
    status = identity.get("status")
    if status == "completed":
        raise ConfigError(f"{record}: the run already completed; nothing to resume")
    if status not in RESUMABLE_STATUSES:
        raise ConfigError(f"{record}: status is {status!r}, not one a run writes ({', '.join(RESUMABLE_STATUSES)}, "
                          "completed): cannot tell whether the run stopped; it cannot be resumed")
    if not isinstance(identity.get("config_hash"), str):
        raise ConfigError(f"{record}: no config_hash (got {identity.get('config_hash')!r}): cannot tell whether "
                          "the config to resume with is the run's; it cannot be resumed")
    attempts = identity.get("attempts", 1)
    if type(attempts) is not int or attempts < 1:
        raise ConfigError(f"{record}: attempts is {attempts!r}, not a count of 1 or more; it cannot be resumed")


def logged_rows(run_dir: Path) -> tuple[list[str], list[dict[str, str]]] | None:
    """``csv/metrics.csv``'s header and whole rows (the resume keeps those up to its checkpoint), or None.

    Raises:
        ConfigError: the file cannot be read, naming it and what to do.
    """
    metrics = run_dir / "csv" / "metrics.csv"
    try:
        return csv_table(metrics) if metrics.is_file() else None
    except (OSError, ValueError, csv.Error) as exc:  # ValueError: bytes that are not UTF-8
        raise ConfigError(f"{metrics}: cannot read the run's logged metrics ({exc}); move the file aside to resume "
                          f"without its rows, or start a new run: klear-lab train {run_dir / 'config.yaml'}") from None


def resumable_twins(cfg: dict[str, Any]) -> list[Path]:
    """Earlier runs of ``cfg`` (its name, config hash and seed) under ``run.out_dir`` that stopped at a
    checkpoint and that ``klear-lab resume`` would continue: running the same command again starts over."""
    from klear_lab.tracking import out_dir_of, run_dir_name

    twins = []
    for run_dir in sorted(out_dir_of(cfg).glob(glob.escape(run_dir_name(cfg, "STAMP")).replace("STAMP", "*"))):
        try:
            check_resumable(run_dir, cfg)
        except Exception:  # noqa: BLE001 - a damaged directory is no twin, and a note must not stop the run
            continue
        twins.append(run_dir)
    return twins


class DataChangedError(ConfigError):
    """A stopped run's records differ from those it started with: it cannot continue (a new run can)."""


def check_same_data(run_dir: Path, identity: dict[str, Any], stage: Any) -> None:
    """Refuse to resume on other records than the run started with (``run.json``'s ``data`` digests).

    The config names a data file, not its contents: an edited or replaced file resumed the run on other
    data under the same config hash (and an SFT run's data position skipped another file's batches).
    Runs from before the digests are not checked. On refusal ``stage`` is closed (its engines stop).

    Raises:
        DataChangedError: the training or held-out records differ, naming the config keys and both digests.
    """
    started, now = identity.get("data") or {}, stage.data
    changed = [split for split in started if split in now and now[split] != started[split]]
    if not changed:
        return
    stage.close()
    keys = {"train": "data.sources", "eval": "data.eval_sources"}
    what = "; ".join(f"{keys[s]}: {started[s]} at the start, {now[s]} now" for s in changed)
    raise DataChangedError(f"{run_dir / 'run.json'}: the run's records differ from those it started with ({what}): "
                      "a data file, or a data source's code, changed since; resuming would train on other data. "
                      f"Restore the data, or start a new run from {run_dir / 'config.yaml'}")


def as_resolved(cfg: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` as its run resolved it: ``model.init_from`` sets ``model.name_or_path`` to the parent's run
    when the run starts, so a freshly composed config (a sweep's retry) lacks what the saved one holds."""
    m = cfg["model"]
    if m.get("init_from") and not m.get("name_or_path") and model.get("init_from") == m["init_from"]:
        return {**cfg, "model": {**m, "name_or_path": model.get("name_or_path")}}
    return cfg


def checkpoint_path(run_dir: Path) -> Path:
    """Where :class:`klear_lab.checkpointing.ResumeCheckpoint` keeps a run's latest checkpoint."""
    return run_dir / "checkpoints" / "last.ckpt"


def checkpoint_log_step(ckpt: Path) -> int:
    """The logging step (Lightning's ``_batches_that_stepped``) of the batch that wrote ``ckpt``: rows up to
    it belong to the resumed run, later ones will be logged again (:func:`checkpoint_marks`)."""
    return checkpoint_marks(ckpt)[0]


def _before_checkpoint(row: dict[str, str], log_step: int, eval_after: bool = True) -> bool:
    """A row the resumed run will not log again: up to the checkpoint's logging step, and (``eval_after``)
    the evaluation after its update, logged one step on (:mod:`klear_lab.modules.eval_step`; a resume never
    repeats it)."""
    if not row.get("step"):
        return True
    step = int(float(row["step"]))
    return step <= log_step or (eval_after and step == log_step + 1 and is_evaluation_row(row))


def set_aside_later_rows(run_dir: Path, resumable: Resumable, attempt: int) -> Path | None:
    """Keep the whole ``csv/metrics.csv`` as ``csv/metrics.before-resume-<attempt>.csv``, and in
    ``metrics.csv`` only the rows logged up to the checkpoint's step (later ones will be logged again).

    Returns the kept copy, or None when there was no ``metrics.csv``.
    """
    if resumable.logged is None:
        return None
    path = run_dir / "csv" / "metrics.csv"
    fields, rows = resumable.logged
    backup = path.with_name(f"metrics.before-resume-{attempt}.csv")
    if not backup.exists():  # a second try of the same resume keeps the first copy
        os.link(path, backup)

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(r for r in rows if _before_checkpoint(r, resumable.log_step, resumable.eval_after))

    atomic_write(path, write)
    return backup
