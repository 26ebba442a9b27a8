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
import socket
import sys
from pathlib import Path
from typing import Any

from klear_lab.errors import ConfigError
from klear_lab.tracking import atomic_write, config_hash, csv_rows

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
    from klear_lab.config.layers import override_key

    run_dir = Path(run_dir)
    saved, record = run_dir / "config.yaml", run_dir / "run.json"
    if not saved.is_file() or not record.is_file():
        raise ConfigError(f"{run_dir}: not a run directory (needs config.yaml and run.json)")
    identity = read_record(record)
    if identity.get("status") == "completed":
        raise ConfigError(f"{record}: the run already completed; nothing to resume")
    for item in overrides or []:
        key = override_key(item)
        if key not in RESUME_OVERRIDABLE:
            raise ConfigError(f"resume {run_dir}: {item!r}: a resumed run keeps its config; only "
                              f"{', '.join(RESUME_OVERRIDABLE)} may change (to change anything else, start a "
                              f"new run: klear-lab train {saved} {item})")
    cfg = compose(saved, overrides)
    check_resumable(run_dir, cfg)
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


def check_resumable(run_dir: Path, cfg: dict[str, Any]) -> None:
    """Refuse to continue ``run_dir`` with ``cfg`` unless the run can continue and ``cfg`` is its config
    (``run_experiment(cfg, resume=...)`` from the API or a sweep, as well as ``klear-lab resume``).

    Raises:
        ConfigError: an eval run, a completed run, one still running on this machine, another config,
            no checkpoint or one that cannot be loaded, a ``csv/metrics.csv`` that cannot be read.
    """
    import yaml

    from klear_lab.distributed import joined_run_dir  # a DDP rank > 0 of this resume: rank 0 is alive

    saved, record = run_dir / "config.yaml", run_dir / "run.json"
    if not saved.is_file() or not record.is_file():
        raise ConfigError(f"{run_dir}: not a run directory (needs config.yaml and run.json)")
    identity = read_record(record)
    if cfg["run"]["kind"] not in ("sft", "rl"):
        raise ConfigError(f"{saved}: run.kind is {cfg['run']['kind']!r}; only sft and rl runs resume "
                          "(run the evaluation again instead)")
    if identity.get("status") == "completed":
        raise ConfigError(f"{record}: the run already completed; nothing to resume")
    if identity.get("status") == "running" and joined_run_dir() is None and still_running(identity):
        raise ConfigError(f"{record}: the run is still running (pid {identity['pid']} on this machine); "
                          "stop it before resuming, or two processes would write one run")
    written = yaml.safe_load(saved.read_text()) or {}
    seed = (written.get("run") or {}).get("seed")
    if seed is not None and cfg["run"]["seed"] != seed:
        raise ConfigError(f"{saved}: the run started with run.seed={seed}, the config to resume with has "
                          f"{cfg['run']['seed']}: not the same run")
    got = config_hash(as_resolved(cfg, written.get("model") or {}))
    if got != identity.get("config_hash"):
        raise ConfigError(f"{saved}: the config to resume with hashes to {got}, but the run started with "
                          f"{identity.get('config_hash')} (a setting, a default, or a plugin's code differs; "
                          f"{run_dir / 'plugins'} keeps the plugins' code the run started with): not the same run")
    if not checkpoint_path(run_dir).is_file():
        raise ConfigError(f"{checkpoint_path(run_dir)}: no checkpoint to resume from (the run stopped before "
                          f"its first trainer.checkpoint_every={cfg['trainer']['checkpoint_every']} steps, or "
                          "trainer.checkpoint was false)")
    checkpoint_log_step(checkpoint_path(run_dir))  # one that cannot load: refused here, not after the run is built
    metrics = run_dir / "csv" / "metrics.csv"  # the resume keeps its rows up to the checkpoint (set_aside_later_rows)
    try:
        if metrics.is_file():
            csv_rows(metrics)
    except (OSError, ValueError, csv.Error) as exc:  # ValueError: bytes that are not UTF-8
        raise ConfigError(f"{metrics}: cannot read the run's logged metrics ({exc}); move the file aside to resume "
                          f"without its rows, or start a new run: klear-lab train {saved}") from None


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


PROCESS_KEYS = ("pid", "host", "pid_start")


def running_process() -> dict[str, Any]:
    """Who writes a running run: ``run.json`` keeps it so a resume can tell a live run from a dead one.
    ``pid_start`` (the process' start time) tells the writer from a later process given the same pid."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "pid_start": process_start(os.getpid())}


def still_running(identity: dict[str, Any]) -> bool:
    """Whether the process a ``running`` record names is alive here and still the run's writer (another
    machine's cannot be checked: a run preempted there is resumed)."""
    pid = identity.get("pid")
    if identity.get("host") != socket.gethostname() or not isinstance(pid, int):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # gone (or no /proc: assume gone)
        return False
    if identity.get("pid_start") is not None:  # a zombie (killed, not yet reaped) has no command line
        return bool(cmdline) and process_start(pid) == identity["pid_start"]
    return b"klear" in cmdline  # a record from before pid_start: the best guess


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, /proc/PID/stat field 22), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[19])  # fields after the command name start at field 3


def checkpoint_path(run_dir: Path) -> Path:
    """Where :class:`klear_lab.checkpointing.ResumeCheckpoint` keeps a run's latest checkpoint."""
    return run_dir / "checkpoints" / "last.ckpt"


def saved_identity(run_dir: Path) -> dict[str, Any]:
    """``run.json`` without its status, with one more attempt counted and its code commit recorded."""
    identity = read_record(run_dir / "run.json")
    identity = {k: v for k, v in identity.items() if k not in ("status", "error", *PROCESS_KEYS)}
    identity["attempts"] = int(identity.get("attempts", 1)) + 1
    identity["git_commits"] = attempt_commits(run_dir, identity)
    identity["software"] = attempt_software(run_dir, identity)
    return identity


def warn_if_elsewhere(run_dir: Path) -> None:
    """Warn when a resume runs from another directory than the run started in (``work_dir``): the relative
    paths of its config are read from the working directory. Before the data is read, whose error it explains."""
    try:
        started_in = read_record(run_dir / "run.json").get("work_dir")
    except (ConfigError, OSError):
        return  # the resume's own checks say what is wrong with run.json
    if started_in and Path(started_in) != Path.cwd():
        print(f"warning: {run_dir}: resuming from {Path.cwd()}; the run started in {started_in}, and the relative "
              "paths in its config.yaml (data files, model.name_or_path) are read from the working directory",
              file=sys.stderr)


def attempt_software(run_dir: Path, identity: dict[str, Any]) -> list[dict[str, str]]:
    """The software versions of each attempt, this one last (runs from before they were recorded have none
    for their earlier attempts). Warns on stderr naming what changed since the previous attempt."""
    from klear_lab.tracking import software_versions

    earlier = max(int(identity.get("attempts", 2)) - 1, 1)  # attempts before this one
    before, now = list(identity.get("software") or [{}] * earlier), software_versions()  # {}: not recorded
    last = before[-1] if before and isinstance(before[-1], dict) else None
    if last and last != now:
        changed = [f"{k} {last.get(k, '(none)')} -> {now.get(k, '(none)')}" for k in sorted({*last, *now})
                   if last.get(k) != now.get(k)]
        print(f"warning: {run_dir}: resuming with other software than the run's previous attempt: "
              f"{', '.join(changed)} (run.json records each attempt's in software)", file=sys.stderr)
    return [*before, now]


def attempt_commits(run_dir: Path, identity: dict[str, Any]) -> list[str]:
    """The code commit of each attempt, this one last (``git_commit`` stays the first attempt's): a run
    resumed on other code kept only the first commit, as if all of its steps had run on it. Warns on stderr
    when this attempt's commit is not the previous attempt's."""
    from klear_lab.tracking import git_commit

    before = identity.get("git_commits") or [identity.get("git_commit", "unknown")]
    now = git_commit()
    if now != before[-1]:
        print(f"warning: {run_dir}: resuming on code commit {now}; the run's previous attempt ran on "
              f"{before[-1]} (run.json records both in git_commits)", file=sys.stderr)
    return [*before, now]


def checkpoint_log_step(ckpt: Path) -> int:
    """The logging step (Lightning's ``_batches_that_stepped``) of the batch that wrote ``ckpt``: rows up to
    it belong to the resumed run, later ones will be logged again.

    Raises:
        ConfigError: ``ckpt`` cannot be read, or is not a checkpoint Lightning wrote (empty, cut short by a
            full disk or a copy, overwritten), naming it and what to do instead of a torch traceback.
    """
    import pickle

    import torch

    advice = (f"the run cannot continue from it: put back an intact copy of the file, or start a new run: "
              f"klear-lab train {ckpt.parent.parent / 'config.yaml'}")
    try:
        state = torch.load(ckpt, map_location="cpu", mmap=True, weights_only=True)
        return int(state["loops"]["fit_loop"]["epoch_loop.state_dict"]["_batches_that_stepped"])
    except (PermissionError, FileNotFoundError, IsADirectoryError) as exc:  # the file itself may be fine
        raise ConfigError(f"{ckpt}: cannot read the checkpoint ({exc.strerror or exc}); {advice}") from None
    except (OSError, RuntimeError, ValueError, EOFError, pickle.UnpicklingError, KeyError, IndexError,
            TypeError) as exc:  # OSError: a zip reader's EINVAL on a file cut short; EIO, the disk
        raise ConfigError(f"{ckpt}: cannot load the checkpoint (corrupt or truncated: {_load_failure(ckpt, exc)}); "
                          f"{advice}") from None


def _load_failure(ckpt: Path, exc: BaseException) -> str:
    """What is wrong with ``ckpt`` in a few words (torch's messages run to several sentences of advice)."""
    if ckpt.stat().st_size == 0:
        return "the file is empty"
    if isinstance(exc, (KeyError, IndexError, TypeError)):
        return f"no Lightning loop state in it ({type(exc).__name__}: {exc})"
    if isinstance(exc, OSError):
        return f"it does not read as a zip archive ({exc.strerror or exc})"
    text = str(exc).strip()
    if text.startswith("mmap can only be used with files saved with"):  # not a zip archive at all
        return "not a zip archive as torch.save writes"
    if "WeightsUnpickler error: " in text:  # objects other than tensors and plain values: not what Lightning wrote
        text = "not a checkpoint Lightning wrote: " + text.partition("WeightsUnpickler error: ")[2]
    text = text.partition("\n")[0]
    text = text.partition(". ")[0].rstrip(".") or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def set_aside_later_rows(run_dir: Path, step: int, attempt: int) -> Path | None:
    """Keep the whole ``csv/metrics.csv`` as ``csv/metrics.before-resume-<attempt>.csv``, and in
    ``metrics.csv`` only the rows logged up to ``step`` (later ones will be logged again).

    Returns the kept copy, or None when there was no ``metrics.csv``.
    """
    path = run_dir / "csv" / "metrics.csv"
    if not path.is_file():
        return None
    with path.open(newline="") as f:
        fields = csv.DictReader(f).fieldnames or []
    rows = csv_rows(path)
    backup = path.with_name(f"metrics.before-resume-{attempt}.csv")
    if not backup.exists():  # a second try of the same resume keeps the first copy
        os.link(path, backup)

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(r for r in rows if not r.get("step") or int(float(r["step"])) <= step)

    atomic_write(path, write)
    return backup
