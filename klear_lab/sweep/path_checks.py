"""Checks that the directories a sweep writes can be made, run first (``--validate-only`` too).

A regular file given as the out dir, or a sweep or trial run name longer than a file name may be here
(255 bytes on most file systems), passed every other check: the sweep then stopped creating its study,
or every trial read its data, built its model and failed creating its run directory. The longest name
measured is that of a trial's evaluation run (``klear-lab compare --rescore``), the trial's with ``-eval``:
one too long is cut to fit at the rescore, the arm's label at its end first (so the evaluations of arms that
differ in their last characters are named alike), or, where file names are shorter than the 255 bytes that
cut allows, refused.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from klear_lab.errors import ConfigError
from klear_lab.sweep.grid import Arm, arm_label, trial_run_name, value_label
from klear_lab.sweep.probe import probe_values
from klear_lab.sweep.spec import SweepSpec
from klear_lab.tracking import RUN_DIR_NAME_MAX


def check_sweep_dirs(spec: SweepSpec, arms: list[Arm], out_dir_flag: bool = False, name_flag: bool = False) -> None:
    """Raise ``ConfigError`` when the sweep directory or a trial's run directory could not be made under
    ``spec.out_dir``. ``out_dir_flag`` / ``name_flag``: the out dir / name came from ``--out-dir`` / ``--name``,
    and the message names that option instead of the spec's key."""
    out_dir = f"--out-dir {spec.out_dir}" if out_dir_flag else f"{spec.path}: out_dir: {spec.out_dir}"
    name = f"--name {_short(spec.name)}" if name_flag else f"{spec.path}: name: {_short(spec.name)}"
    found = existing_ancestor(spec.out_dir)
    limit = _name_max(found)
    for part in [*spec.out_dir.absolute().relative_to(found).parts, spec.name]:
        if len(part.encode()) > limit:
            where = name if part == spec.name else f"{out_dir}: {_short(part)}"
            raise ConfigError(f"{where}: is {len(part.encode())} bytes, but a directory name may have at most "
                              f"{limit} here ({found}); give a shorter one")
    blocker = file_in_the_way(spec.sweep_dir)  # the out dir (or one above it), or the sweep's in it
    if blocker is not None:
        raise ConfigError(f"{out_dir}: {blocker} is a file, not a directory: the sweep writes its directory "
                          f"{spec.sweep_dir} (study, trials, runs) there; give a directory")
    if (problem := creation_problem(spec.sweep_dir)) is not None:  # a read-only mount, /proc: not at the end
        raise ConfigError(f"{out_dir}: cannot write the sweep directory {spec.sweep_dir} there: {problem}; give a "
                          "directory this machine can write")
    started = (spec.sweep_dir / "sweep.json").is_file()  # its trials' names are what they are: not refused now
    longest = max(_run_dir_names(spec, arms, evaluations=not started), key=lambda n: len(n.encode()))
    if len(longest.encode()) > limit:
        what = "a trial's run directory" if started else (
            "the run directory of a trial's evaluation (`klear-lab compare --rescore`; a cut name would lose "
            "the arm's label)")
        raise ConfigError(f"{name}: {what} would be named like {_short(longest)}, {len(longest.encode())} bytes, "
                          f"but a directory name may have at most {limit} here ({found}); shorten the sweep "
                          "name (or an axis's value labels, `labels:`)")


def _run_dir_names(spec: SweepSpec, arms: list[Arm], evaluations: bool = True) -> list[str]:
    """The longest names ``create_run_dir`` may give each arm's runs: with ``evaluations``, its trials'
    evaluation runs, whose names are the trials' own with a suffix (no config is composed: this runs before
    the checks that compose them, whose refusal would blame an axis). A sweep that started before this
    check counted the suffix is measured by its trials' names, so that it still continues."""
    from klear_lab.tracking import longest_run_dir_name

    if arms:
        labels = [a.label for a in arms]
    else:  # sampled values: each axis at the value with the longest label it may take
        labels = [arm_label(spec.axes, {a.key: max(_label_probes(a), key=lambda v, a=a: len(value_label(a, v)))
                                        for a in spec.axes})]
    seed = max(spec.seeds, key=lambda s: len(str(s)))
    names = [trial_run_name(spec, label) for label in labels]
    return [longest_run_dir_name(eval_run_name(n) if evaluations else n, seed) for n in names]


def eval_run_name(run_name: str) -> str:
    """``run.name`` of the evaluation ``klear-lab eval`` (so ``compare --rescore``) makes of a run named
    ``run_name``, written beside it, before ``stages.eval.fitting_name`` cuts one too long: as
    ``stages.eval._eval_run`` names it, which is not imported here (it imports torch, seconds before any
    check; a test holds the two to one name)."""
    return f"{run_name}-eval"


def _label_probes(axis: Any) -> list[Any]:
    """Values whose labels are as long as ``axis``'s may get: its bounds, and for a float range a value
    between them with every significant digit a label keeps (bounds 0.001 and 0.01 print shorter than 0.004567)."""
    values = probe_values(axis)
    if axis.is_range and isinstance(values[0], float):
        values.append(values[0] + (values[1] - values[0]) * 0.1234567)
    return values


def existing_ancestor(path: Path) -> Path:
    """``path`` or the nearest of its parents that exists (a file, maybe)."""
    path = path.absolute()
    while not os.path.lexists(path) and path != path.parent:  # lexists: False, not an error, for a long name
        path = path.parent
    return path


def file_in_the_way(path: Path) -> Path | None:
    """The file (``path`` or one above it) that stops ``path.mkdir(parents=True)``, else None: asked before
    any work, so the refusal names the option instead of a traceback from ``mkdir`` at the end."""
    found = existing_ancestor(path)
    return None if found.is_dir() else found


def creation_problem(path: Path) -> str | None:
    """Why a file could not be made in directory ``path`` (or ``path`` made, where it is missing): the error's
    text, else None. Probed with a nameless temporary file (``O_TMPFILE``) in ``path`` or the nearest directory
    above it that exists, so nothing is left and no directory is made (``--validate-only`` makes none)."""
    import tempfile

    try:
        with tempfile.TemporaryFile(dir=existing_ancestor(path)):
            return None
    except OSError as exc:
        return exc.strerror


def check_out_dir(path: Path, option: str) -> None:
    """Raise ``ConfigError`` when ``path`` (given as ``option``, e.g. ``--out-dir X``) is a file or lies
    under one: it could not be made into the directory the outputs go to."""
    blocker = file_in_the_way(path)
    if blocker is None:
        return
    if blocker == path.absolute():
        raise ConfigError(f"{option}: is a file; give a directory")
    raise ConfigError(f"{option}: {blocker} is a file, not a directory; give a directory")


def _name_max(directory: Path) -> int:
    """The longest file name, in bytes, the file system holding ``directory`` allows."""
    try:
        return os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError):
        return RUN_DIR_NAME_MAX


def _short(text: str, keep: int = 60) -> str:
    """``text`` quoted, its middle left out when longer than ``keep`` characters (a 300-character name)."""
    return repr(text) if len(text) <= keep else repr(f"{text[:keep - 20]}...{text[-17:]}")


def writable_dir(path: Path, hint: str = "") -> None:
    """Make ``path`` and a file in it (removed at once) before anything is written there: a read-only mount or
    another user's sweep directory is a ConfigError naming it (with ``hint``), not a traceback halfway."""
    import tempfile

    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise ConfigError(f"cannot write to {path}: {exc.strerror}{hint}") from None
