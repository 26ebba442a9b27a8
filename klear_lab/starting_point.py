"""The starting point of a run (``model.init_from``) and the run directories it is looked up in.

``model.init_from: EXPERIMENT.yaml`` names the run to start from by its config: its newest completed run
with that config hash and seed, trained on the records its data files hold now, else such a run a sweep
under ``sweep_runs/`` trained (hard-linked: :mod:`klear_lab.start_sharing`), else trained first (or its
stopped run resumed). A builder: it reads the config, as :mod:`klear_lab.builders` does.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

from klear_lab.builders import build_eval_records, build_run_records
from klear_lab.data.file_stats import data_file_stats
from klear_lab.errors import ConfigError, DataError, KlearError


def resolve_init_from(cfg: dict[str, Any]) -> None:
    """``model.init_from: EXPERIMENT.yaml``: use its newest completed run with the same config hash,
    else one a sweep trained (hard-linked here: ``start_sharing.share_sweep_start``), else train it
    first (under a file lock, so parallel sweep workers train it once)."""
    m = cfg["model"]
    if m["name_or_path"] and m["init_from"]:
        warn_init_from_unused(cfg)
    if m["name_or_path"] or not m["init_from"]:
        return
    from klear_lab.start_sharing import share_sweep_start
    from klear_lab.tracking import config_hash, out_dir_of

    parent = parent_config(cfg)
    out = out_dir_of(parent)
    out.mkdir(parents=True, exist_ok=True)
    parent_hash = config_hash(parent)  # reads each plugin's code: once
    data = None  # read before waiting on the lock, where parallel trials would read in turn
    newest = find_completed_run(out, parent_hash, seed=parent["run"]["seed"])
    if newest is not None and not files_unchanged(newest, parent):
        with contextlib.suppress(DataError):  # completed_parent says it
            data = records_digests(parent)
    with init_lock(out, parent_hash, parent["run"]["seed"], lambda: print(
            f"model.init_from {m['init_from']}: waiting for another process training or sharing the same starting "
            f"point in {out}, to use it", file=sys.stderr)):
        # looked up again under the lock: a parallel trial may have trained it while this one waited
        if parent["model"]["init_from"] and not parent["model"]["name_or_path"]:  # so may its own starting point
            parent, data = parent_config(cfg), None  # (a `klear-lab train` of the parent trained both)
            parent_hash = config_hash(parent)
        run_dir, stale = completed_parent(parent, parent_hash, data)
        shared = None if run_dir is not None else share_sweep_start(parent, parent_hash, data)
        if shared is not None:
            run_dir = shared[1]
        if stale is not None:
            after = f"using {run_dir}, trained on these" if run_dir else "training it again"
            print(f"model.init_from {m['init_from']}: {stale}; {after}", file=sys.stderr)
        if run_dir is None:
            run_dir = _train_parent(parent, parent_hash, m["init_from"], out, quiet=stale is not None)
            print(f"model.init_from {m['init_from']}: starting point ready: {run_dir}", file=sys.stderr)
        elif shared is not None or stale is None:  # which run the model comes from (its name may be another's)
            print(f"model.init_from {m['init_from']}: starting from {_origin(run_dir, shared)} (same config "
                  f"hash {parent_hash}, seed {parent['run']['seed']})", file=sys.stderr)
    m["name_or_path"] = str(run_dir.resolve())


def init_lock(out: Path, parent_hash: str, seed: int,
              on_wait: Callable[[], None] | None = None) -> contextlib.AbstractContextManager:
    """The lock on the starting point ``parent_hash`` (config hash) and ``seed`` for runs in the output dir
    ``out``, held while one of them trains or shares it (parallel trials of a sweep train it once), and by a
    ``klear-lab train`` of that very config while it runs (``start_sharing.train_holds``); a sweep that
    would take a ``klear-lab train``'s run of it takes it too (``start_sharing.train_lock``)."""
    from klear_lab.file_lock import exclusive_lock

    return exclusive_lock(init_lock_path(out, parent_hash, seed), on_wait)


def init_lock_path(out: Path, config_hash: str, seed: int) -> Path:
    return Path(out) / f".init-{config_hash}-s{seed}.lock"


def _origin(run_dir: Path, shared: tuple[Path, Path] | None) -> str:
    """Where the completed run of a starting point came from: this output dir, or a sweep's (``shared``)."""
    if shared is None:
        return f"its completed run {run_dir}"
    linked = os.path.samefile(shared[0] / "run.json", run_dir / "run.json")  # else copied: another file system
    return f"the completed run {shared[0]} a sweep trained, {'hard-linked' if linked else 'copied'} into {run_dir}"


def warn_init_from_unused(cfg: dict[str, Any]) -> None:
    """``model.name_or_path`` wins over ``model.init_from``: say so on stderr, unless it is a run of
    ``init_from`` (what a run's saved config holds, ``init_from`` resolved)."""
    from klear_lab.resume import read_record
    from klear_lab.tracking import config_hash

    m = cfg["model"]
    model = Path(m["name_or_path"]).expanduser()
    if model.is_absolute() and not model.exists():  # a saved config's starting point, gone: the model's error says so
        return
    try:
        record = next(p / "run.json" for p in (model, model.parent) if (p / "run.json").is_file())
        if read_record(record).get("config_hash") == config_hash(parent_config(cfg)):
            return
    except (StopIteration, KlearError):  # no record, or a damaged one
        pass
    print(f"warning: model.init_from ({m['init_from']}) is not used: model.name_or_path ({m['name_or_path']}) is "
          "set and is not a run of its current config; set model.init_from=null to say so", file=sys.stderr)


def _train_parent(parent: dict[str, Any], parent_hash: str, init_from: str, out: Path, quiet: bool = False) -> Path:
    """Continue the newest interrupted run of ``parent`` (Ctrl-C, kill, preemption) from its checkpoint,
    or train it; a resume that fails (say, a checkpoint a newer torch cannot read) falls back to a new run.
    ``quiet``: the caller said why it trains (a completed run passed over), so not "no completed run"."""
    from klear_lab.distributed import several_devices
    from klear_lab.resume import resume_config
    from klear_lab.run import run_experiment

    stopped = find_resumable_run(out, parent_hash, seed=parent["run"]["seed"])
    if several_devices(parent["trainer"]):  # its DDP launcher would re-run this command, not the parent's
        how = f"klear-lab resume {stopped}" if stopped else f"klear-lab train {init_from} run.out_dir={out}"
        which = "run trained on the records its data files hold now" if quiet else "run"
        raise ConfigError(f"model.init_from {init_from!r} trains on several devices and has no completed "
                          f"{which} in {out}: {'finish' if stopped else 'train'} it first with `{how}`")
    if stopped is not None:
        print(f"model.init_from {init_from}: resuming its stopped run {stopped}", file=sys.stderr)
        threads = f"trainer.num_threads={parent['trainer']['num_threads']}"
        try:
            return _parent_dir(run_experiment(resume_config(stopped, [threads]), resume=stopped))
        except Exception as exc:  # noqa: BLE001 (not Ctrl-C: that stops this command too)
            print(f"model.init_from {init_from}: resuming {stopped} failed ({type(exc).__name__}: {exc}); "
                  "training it from the start in a new run", file=sys.stderr)
    if not quiet:
        print(f"model.init_from {init_from}: no completed run of it (this config, seed {parent['run']['seed']}) "
              f"in {out}: training it first, a whole {parent['run']['kind']} run (its plan: klear-lab train "
              f"{init_from} --dry-run)", file=sys.stderr)
    try:
        return _parent_dir(run_experiment(parent))
    except KlearError as exc:  # its data's or config's error named the file, not whose run read it
        exc.add_note(f"while training the starting point (model.init_from {init_from}); alone: klear-lab train "
                     f"{init_from}")
        raise


def _parent_dir(result: Any) -> Path:
    """The parent's run directory; a SIGTERM its run held back after training (recorded now: a requeued
    command finds the parent completed) stops this command before its own run starts, as a preemption."""
    if result.sigterm_held:
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        raise SIGTERMException
    return result.run_dir


def parent_config(cfg: dict[str, Any], read_data: bool = True) -> dict[str, Any]:
    """The composed ``model.init_from`` experiment, run in ``cfg``'s output dir with its threads. A parent
    that starts from an ``init_from`` of its own gets that one's newest completed run as its
    ``model.name_or_path``, as its own run records it (and hashes it): looked up with it unset, the middle
    run of a chain was never found, and every run of the chain's last link trained it again (a review)."""
    from klear_lab.config.compose import compose

    parent = compose(cfg["model"]["init_from"])
    parent["run"]["out_dir"] = cfg["run"]["out_dir"]
    parent["trainer"]["num_threads"] = cfg["trainer"]["num_threads"]
    return with_start_looked_up(parent, read_data)


def with_start_looked_up(cfg: dict[str, Any], read_data: bool = True) -> dict[str, Any]:
    """``cfg`` (changed in place) with its ``model.init_from``'s newest completed run as ``model.name_or_path``
    where it has one and that is unset: the config its run will record and hash. Nothing is trained. Without
    ``read_data``, the newest completed run whatever records it trained on (reading them to check takes
    seconds for a generated world; ``start_sharing.train_holds`` only names a lock with it)."""
    from klear_lab.tracking import config_hash, out_dir_of

    m = cfg["model"]
    if m["init_from"] and not m["name_or_path"]:
        parent = parent_config(cfg, read_data)
        if read_data:
            run_dir, _ = completed_parent(parent, config_hash(parent))
        else:
            run_dir = find_completed_run(out_dir_of(parent), config_hash(parent), seed=parent["run"]["seed"])
        if run_dir is not None:  # none: the parent has no completed run either, and trains it first
            m["name_or_path"] = str(run_dir.resolve())
    return cfg


def completed_parent(parent: dict[str, Any], parent_hash: str,
                     data: dict[str, str] | None = None) -> tuple[Path | None, str | None]:
    """The newest completed run of the starting point ``parent`` trained on the records its data files hold
    now (``data``: their digests, when already read), and a note on a newer one passed over because it
    trained on other records (a data file edited since: the config, and so the hash, names the file, not
    its contents). Data this machine cannot read (a corpus deleted after training) leaves the newest run,
    with a warning that it was not checked. A dry run reads the same."""
    from klear_lab.tracking import out_dir_of

    out, seed = out_dir_of(parent), parent["run"]["seed"]
    newest = find_completed_run(out, parent_hash, seed=seed)
    if newest is None or files_unchanged(newest, parent):
        return newest, None
    try:
        data = data or records_digests(parent)
    except DataError as exc:
        warnings.warn(f"model.init_from {parent['run']['experiment']}: its data cannot be read here to check that "
                      f"its completed run {newest} trained on it ({exc}); using that run", UserWarning, stacklevel=2)
        return newest, None
    current = find_completed_run(out, parent_hash, seed=seed, data=data)
    if current == newest:
        return current, None
    trained = json.loads((newest / "run.json").read_text()).get("data") or {}
    changed = ", ".join(f"{k}: {trained.get(k)} then, {data[k]} now" for k in data if trained.get(k) != data[k])
    return current, f"its completed run {newest} trained on other records than its data files hold now ({changed})"


def files_unchanged(run_dir: Path, cfg: dict[str, Any]) -> bool:
    """Whether ``cfg`` reads the very files ``run_dir`` read, unchanged since (size, mtime and ctime, as ``run.json``
    keeps them); False when that cannot be told (runs from before, a generated world)."""
    stats = data_file_stats(cfg)
    kept = json.loads((run_dir / "run.json").read_text()).get("data_files")
    if stats is None or not isinstance(kept, dict) or kept.keys() != stats.keys():
        return False  # a run from before the change time was kept: its size and mtime alone, as then
    return all(isinstance(was, list) and len(was) >= 2 and stats[f][: len(was)] == was for f, was in kept.items())


def records_digests(cfg: dict[str, Any]) -> dict[str, str]:
    """The ``data`` digests a run of ``cfg`` would keep in ``run.json``: its records as read now, under the
    seed the run sets first (a plugin source may draw from the global RNGs), whose states are put back.
    Warnings about the data are left to the run that trains on it."""
    import random

    import lightning as L
    import numpy as np

    from klear_lab.data.records import data_digests

    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    env = {k: os.environ.get(k) for k in ("PL_GLOBAL_SEED", "PL_SEED_WORKERS")}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if cfg["run"]["kind"] == "eval":  # an eval run does not seed before it reads
                return data_digests(None, build_eval_records(cfg))
            L.seed_everything(cfg["run"]["seed"], workers=True, verbose=False)
            records, _, eval_records = build_run_records(cfg, quiet=True)  # its decontamination line: the run's
            return data_digests(records, eval_records)
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        for key, value in env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def find_completed_run(out_dir: Path, cfg_hash: str, seed: int | None = None, need_model: bool = True,
                       data: dict[str, str] | None = None) -> Path | None:
    """Newest run directory under ``out_dir`` whose run.json says completed with ``cfg_hash``
    (and, given ``seed``, whose saved config has that ``run.seed``: the hash leaves seeds out),
    holding a final model unless ``need_model`` is False (eval runs have none), and, given ``data``
    (:func:`records_digests`), trained on those records (runs from before the digests pass)."""
    return _newest(run_dir for run_dir, info in _run_records(out_dir)
                   if info.get("status") == "completed" and info.get("config_hash") == cfg_hash
                   and (not need_model or (run_dir / "model" / "config.json").is_file())
                   and (seed is None or saved_seed(run_dir) == seed)
                   and (data is None or info.get("data") in (None, data)))


def find_resumable_run(out_dir: Path, cfg_hash: str, seed: int) -> Path | None:
    """Newest run under ``out_dir`` with ``cfg_hash`` and ``seed`` that ``klear-lab resume`` accepts:
    stopped or failed on this machine, with a checkpoint, its saved config still composing to its hash."""
    from klear_lab.resume import resume_config

    def resumable(run_dir: Path) -> bool:
        try:
            resume_config(run_dir)  # not running now, has a checkpoint, same config
        except (ConfigError, OSError, ValueError):
            return False
        return True

    return _newest(run_dir for run_dir, info in _run_records(out_dir)
                   if info.get("status") in ("running", "failed") and info.get("config_hash") == cfg_hash
                   and info.get("host") == socket.gethostname() and saved_seed(run_dir) == seed
                   and resumable(run_dir))


def _run_records(out_dir: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """(run directory, its run.json) for each readable one under ``out_dir``; a ``.sharing-*`` directory is
    no run: a starting point being shared was copied there first, and a killed copy stays half made."""
    for path in out_dir.expanduser().glob("*/run.json"):
        if path.parent.name.startswith(".sharing-"):
            continue
        try:
            info = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(info, dict):  # a damaged record (a JSON list, say) is no run to reuse
            yield path.parent, info


def _newest(run_dirs: Iterable[Path]) -> Path | None:
    return max(run_dirs, key=lambda p: p.stat().st_mtime, default=None)


def saved_seed(run_dir: Path) -> int | None:
    """``run.seed`` of a run directory's saved ``config.yaml`` (None when unreadable)."""
    import yaml

    try:
        return (yaml.safe_load((run_dir / "config.yaml").read_text()) or {}).get("run", {}).get("seed")
    except (OSError, yaml.YAMLError, AttributeError):
        return None
