"""Share a completed starting point (``model.init_from``) trained elsewhere instead of training it again.

A starting point is the same model wherever it was trained when its config hash and seed match and it
trained on the records its data files hold now (``starting_point.find_completed_run`` with
``starting_point.records_digests``: records that cannot be read here are not checked). Such a run is
brought into the run directory that needs it as a copy made of hard links (no extra disk; a plain copy
across file systems), so it stays valid when its source is deleted; its ``wandb/`` is left out (the copy
would hold the source's W&B run id, and ``wandb sync`` of both directories would upload one run twice).
Three callers:

- a sweep, from the other sweeps under its own ``out_dir`` (``parents.share_sibling_start``);
- a run outside every sweep (``klear-lab train``, its ``run.out_dir`` not inside :data:`SWEEP_ROOT`), from
  the sweeps under the :data:`SWEEP_ROOT` beside its ``run.out_dir`` (:func:`share_sweep_start`; for the
  default ``runs``, ``sweep_runs`` of the working directory). Only ``SWEEP_ROOT/*/runs`` is searched: the
  sweeps' default output root, two directory levels, nothing else. Sweeps given another ``--out-dir`` are
  not looked for;
- a sweep, from the ``run.out_dir`` where ``klear-lab train`` of its starting point writes, when that is
  beside its ``out_dir`` as above (:func:`train_runs`, ``parents.share_train_start``): the same pairs of
  directories share, both ways.

All hold the sweeps' lock on that starting point (:func:`start_lock`) while they look and link, so a
command started while a sweep trains it waits, then shares it. A sweep first takes the lock a ``klear-lab
train`` holds on it while training it (:func:`train_lock`), so it waits for that train too: both locks are
taken in one order, the train's first, by trains and sweeps alike, so none waits on another that waits on it.
A ``runs`` that is a symlink (to another disk) is still beside the working directory's ``sweep_runs``: paths
are made absolute, not resolved, to find what is beside what.
"""

from __future__ import annotations

import contextlib
import copy
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from klear_lab.errors import DataError, KlearError

SWEEP_ROOT = Path("sweep_runs")  # SweepSpec.out_dir's default: `klear-lab sweep` writes SWEEP_ROOT/NAME/runs


@contextlib.contextmanager
def start_lock(root: Path, parent_hash: str, seed: int, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """The lock on one starting point (config hash and seed) for every sweep under ``root`` (their
    ``out_dir``), held while one trains or shares it; ``on_wait`` is called when another holds it."""
    from klear_lab.file_lock import exclusive_lock

    with exclusive_lock(root / f".start-{parent_hash}-s{seed}.lock", on_wait):
        yield


def share_sweep_start(parent: dict[str, Any], parent_hash: str,
                      data: dict[str, str] | None = None) -> tuple[Path, Path] | None:
    """For a run outside the sweeps: link a completed run of its starting point ``parent`` (hash
    ``parent_hash``) that a sweep under :data:`SWEEP_ROOT` trained into ``parent``'s ``run.out_dir``;
    ``data``: the digests of its records, when already read. Returns (the sweep's run, the linked copy),
    or None. A run inside :data:`SWEEP_ROOT` (a trial, a sweep training its starting point) is left to
    its sweep, which shares on its own and holds the lock taken here while its starting point trains."""
    from klear_lab.tracking import out_dir_of

    if (root := _sweeps_root(parent)) is None:
        return None
    with _sweeps_lock(root, parent_hash, parent):  # the sweeps looked for once it is held: one may have begun
        return link_completed_start(parent, parent_hash, out_dir_of(parent).resolve(), sorted(root.glob("*/runs")),
                                    data)


def sweep_start(parent: dict[str, Any], parent_hash: str) -> Path | None:
    """The completed run of ``parent`` a sweep under :data:`SWEEP_ROOT` trained that :func:`share_sweep_start`
    would link, for a run outside the sweeps; looked up without the lock and linking nothing (``--dry-run``)."""
    root = _sweeps_root(parent)
    return None if root is None else find_completed_start(parent, parent_hash, sorted(root.glob("*/runs")))


def _sweeps_root(parent: dict[str, Any]) -> Path | None:
    """Where a run of ``parent`` looks for a sweep's (``SWEEP_ROOT/*/runs``): the :data:`SWEEP_ROOT` beside its
    ``run.out_dir`` (for the default ``runs``, ``sweep_runs`` of the working directory, where ``klear-lab sweep``
    writes by default; a run written elsewhere, a test's in its temporary directory, does not take a starting
    point from the working directory's sweeps). None where there is none, or for a run inside one, which is
    left to its sweep."""
    from klear_lab.tracking import out_dir_of

    return _sweeps_beside(_absolute(out_dir_of(parent)))


def _absolute(path: Path) -> Path:
    """``path`` made absolute without resolving symlinks: what is beside a symlinked ``runs`` is beside the link."""
    return Path(os.path.abspath(path))


def _sweeps_beside(runs: Path, made: bool = True) -> Path | None:
    """The :data:`SWEEP_ROOT` beside the run directory ``runs`` (absolute), if ``runs`` is not inside it or the
    working directory's (through symlinks or not); and, with ``made``, if it exists."""
    root = runs.parent / SWEEP_ROOT
    roots = {root, root.resolve(), _absolute(SWEEP_ROOT), SWEEP_ROOT.resolve()}
    inside = any(r.is_relative_to(s) for r in {runs, runs.resolve()} for s in roots)
    return None if inside or (made and not root.is_dir()) else root


def train_runs(init_from: str | Path, sweeps: Path) -> Path | None:
    """Where a sweep under ``sweeps`` (its ``out_dir``) looks for a starting point ``init_from`` that a
    ``klear-lab train`` made: that experiment's composed ``run.out_dir`` (relative: to the working
    directory), where ``klear-lab train INIT_FROM`` run here writes it, and only where a run written there
    would itself look for this sweep's (:func:`_sweeps_root`: ``sweeps`` is the :data:`SWEEP_ROOT` beside
    it). So the default ``sweep_runs`` takes from the ``runs`` beside it, and a sweep given another
    ``--out-dir`` (a test's temporary one) takes nothing from the working directory's runs: exactly the
    pairs that share the other way. One directory, no walk. None when it is not there."""
    from klear_lab.config.compose import compose
    from klear_lab.tracking import out_dir_of

    runs = _absolute(out_dir_of(compose(init_from)))
    beside = _sweeps_beside(runs, made=False)  # a sweep's --validate-only asks before its out_dir exists
    return runs if runs.is_dir() and beside is not None and beside.resolve() == sweeps.resolve() else None


def train_lock(init_from: str | Path, sweeps: Path, parent_hash: str, seed: int,
               on_wait: Callable[[], None] | None = None) -> contextlib.AbstractContextManager:
    """For a sweep under ``sweeps``: the lock a ``klear-lab train`` holds on the starting point ``init_from``
    (hash ``parent_hash``, ``seed``) while it trains or shares it (``starting_point.init_lock`` in
    :func:`train_runs`), or trains it itself (:func:`train_holds`). Taken before the sweeps' :func:`start_lock`,
    as the train takes them, the sweep waits for such a train, then shares its run. None to take (a null
    context) where there are no such runs or they are read-only."""
    from klear_lab.starting_point import init_lock

    runs = train_runs(init_from, sweeps)
    if runs is None or not os.access(runs, os.W_OK):
        return contextlib.nullcontext()
    return init_lock(runs, parent_hash, seed, on_wait)


@contextlib.contextmanager
def train_holds(cfg: dict[str, Any], runs: Path | None = None) -> Iterator[None]:
    """For a ``klear-lab train`` or ``resume`` of ``cfg``: hold its :func:`starting_point.init_lock` in ``runs``
    (default: its ``run.out_dir``; a resumed run's: the directory holding it) while it runs, so a run or sweep
    starting from this config (``model.init_from``) waits for it, then uses its run, instead of training the
    same starting point beside it. Taken only where it is free: a second train of this config and seed would
    not use the first's run, so it does not wait for it. A config with a ``model.init_from`` of its own is
    hashed with its newest completed run, its records not read (seconds for a generated world, on every RL
    train; ``run_experiment`` holds it again under its exact hash once it resolved that starting point).
    Nothing is taken for an eval, or where ``run.out_dir`` cannot be made or written to (the run says why);
    directories made for the lock alone are removed again (a run refused before it starts leaves nothing)."""
    from klear_lab.file_lock import lock_if_free
    from klear_lab.starting_point import init_lock_path, with_start_looked_up
    from klear_lab.tracking import config_hash, out_dir_of

    out = out_dir_of(cfg) if runs is None else runs
    made = [d for d in (out, *out.parents) if not d.exists()]  # leaf first
    path = None
    with contextlib.suppress(KlearError, OSError):  # a model.init_from that cannot be read, no out_dir: the run says so
        if cfg["run"]["kind"] != "eval":  # no run starts from an eval
            looked_up = with_start_looked_up(copy.deepcopy(cfg), read_data=False)  # what a child hashes, mostly
            out.mkdir(parents=True, exist_ok=True)
            path = init_lock_path(out, config_hash(looked_up), cfg["run"]["seed"])
    try:
        with contextlib.ExitStack() as stack:
            if path is not None:
                with contextlib.suppress(OSError):  # a runs dir this user cannot write to (or just removed)
                    stack.enter_context(lock_if_free(path))
            yield
    finally:
        for directory in made:
            try:
                directory.rmdir()  # only where empty: the run's own directory keeps it
            except OSError:
                break


def linked_or_copied(source: Path, copy: Path) -> str:
    """How :func:`link_completed_start` brought ``source`` into ``copy``: "hard-linked", or "copied" where
    links failed (another file system, ``protected_hardlinks``)."""
    return "hard-linked" if os.path.samefile(source / "run.json", copy / "run.json") else "copied"


def _sweeps_lock(root: Path, parent_hash: str, parent: dict[str, Any]) -> contextlib.AbstractContextManager:
    """:func:`start_lock` of the sweeps under ``root``, saying when it waits; none where ``root`` is read-only
    to this user (results copied from elsewhere: the lock file cannot be made, and no sweep of ours trains
    there), so that a run still looks there."""
    if not os.access(root, os.W_OK):
        return contextlib.nullcontext()
    name = parent["run"]["experiment"]
    return start_lock(root, parent_hash, parent["run"]["seed"], lambda: print(
        f"model.init_from {name}: waiting for a sweep training the same starting point in {root}, to share it",
        file=sys.stderr))


def link_completed_start(parent: dict[str, Any], parent_hash: str, runs: Path, sources: Iterable[Path],
                         data: dict[str, str] | None = None) -> tuple[Path, Path] | None:
    """Hard-link the newest completed run of ``parent`` (same hash and seed, trained on the records its data
    files hold now; ``data``: their digests, when already read) found in the run directories ``sources``
    (``runs`` itself left out) into ``runs``. Returns (that run, its copy in ``runs``), or None. Callers
    hold a lock on this starting point for ``runs``, so a half-made copy of it found there is a killed
    share's: removed."""
    from klear_lab import starting_point

    source = find_completed_start(parent, parent_hash, [s for s in sources if s.resolve() != runs.resolve()], data)
    if source is None:
        return None
    seed = parent["run"]["seed"]
    runs.mkdir(parents=True, exist_ok=True)
    prefix = f".sharing-{parent_hash}-s{seed}-"  # hidden: no run (a run name may be 255 bytes)
    for left in runs.glob(f"{prefix}*"):
        shutil.rmtree(left, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=runs))
    try:
        shutil.copytree(source, tmp / "run", copy_function=_link_or_copy, symlinks=True,
                        ignore=lambda where, names: ["wandb"] if Path(where) == source else [])
        os.rename(tmp / "run", runs / source.name)  # atomic: trials never see half a copy
    except OSError:
        if starting_point.find_completed_run(runs, parent_hash, seed) is None:  # not a lost race with another sweep
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    copy = runs / source.name
    return source, copy if copy.is_dir() else starting_point.find_completed_run(runs, parent_hash, seed, data=data)


def find_completed_start(parent: dict[str, Any], parent_hash: str, sources: Iterable[Path],
                         data: dict[str, str] | None = None) -> Path | None:
    """The newest completed run of ``parent`` in the run directories ``sources`` with its hash and seed,
    trained on the records its data files hold now (read here unless ``data`` is given, and only when a
    run has its hash and seed; records that cannot be read: not checked, with a warning naming the run,
    as ``starting_point.completed_parent`` gives for a run of its own output dir), else None."""
    from klear_lab import starting_point

    seed = parent["run"]["seed"]
    candidates = [d for d in sources if starting_point.find_completed_run(d, parent_hash, seed) is not None]
    unread = None
    if candidates and data is None:
        try:
            data = starting_point.records_digests(parent)
        except DataError as exc:
            unread = exc
    found = [run for d in candidates
             for run in [starting_point.find_completed_run(d, parent_hash, seed, data=data)] if run is not None]
    newest = max(found, key=lambda p: p.stat().st_mtime, default=None)
    if newest is not None and unread is not None:
        warnings.warn(f"model.init_from {parent['run']['experiment']}: its data cannot be read here to check that "
                      f"the completed run {newest} trained on it ({unread}); sharing that run", UserWarning,
                      stacklevel=2)
    return newest


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
