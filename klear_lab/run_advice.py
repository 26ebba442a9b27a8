"""What to do about a run a rerun would fail the same way: one that failed on its config or data, diverged, or
failed in a component's code. ``klear-lab runs``, ``klear-lab resume`` of a sweep's trial and ``klear-lab eval``
word it alike. And what a resume that misses a moved data file can do."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from klear_lab.errors import ComponentError, DivergedError


def fix_first(error: type[BaseException], run_dir: Path, sweep: str | None) -> str:
    """Advice for a run that failed on its config, data or a component's code, or diverged: a rerun (or resume,
    or a rerun of its sweep, ``sweep``: the command that continues it) fails the same way, so the cause is
    fixed first (as ``klear-lab sweep`` says of such trials). ``klear-lab runs`` and ``klear-lab resume`` of a
    sweep's trial word it alike."""
    if issubclass(error, ComponentError):
        return fix_the_code(run_dir, sweep)
    diverged = issubclass(error, DivergedError)
    fix = "fix the config first (a lower optim.lr, say)" if diverged else "fix the config or data first"
    if sweep is not None:
        return f"{fix} in the sweep spec: a rerun of the sweep would likely repeat it"
    change = "optim.lr=..." if diverged else "KEY=VALUE"
    again = f"klear-lab train {run_dir / 'config.yaml'} {change}"
    if command := _started_by(run_dir):  # an edited experiment YAML is read by its command, not the saved config
        where = _from_where_it_started(run_dir, command[2])
        again += f"; or, once its experiment is fixed, {where}{shlex.join(command)}"
    return f"{fix}: a rerun would likely repeat it; {again}"


def fix_the_code(run_dir: Path, sweep: str | None) -> str:
    """Advice for a run a component's code failed (:class:`ComponentError`, a plugin's reward returning too few
    outputs, say). Its saved ``config.yaml`` runs the copy of a ``.py`` plugin's code the run kept
    (``RUN_DIR/plugins/``, :mod:`klear_lab.plugin_copies`), so a rerun of it never runs the fix: the experiment
    does, as does a copy of the config under another name (unless it names kept copies: a rerun of a saved config
    with the plugin changed). A sweep reads the plugin file itself, and refuses edited plugin code once trials of
    its study finished (the config hash covers it)."""
    saved, plugins = _saved_run(run_dir)
    named = [Path(p) for p in plugins if p.endswith(".py")]
    files = [_plugin_file(p) for p in named]
    what = f"the plugin's code ({', '.join(map(str, files))})" if files else \
        "the component's code (the file the error names)"
    if sweep is not None:
        refusal = (" (once other trials of it finished, the sweep refuses the edited plugin: then run it as a new "
                   "study, adding --name NEW)") if files else ""
        return f"fix {what} first, then rerun the sweep: {sweep}{refusal}"
    config = run_dir / "config.yaml"
    if not files:  # a plugin module or package: the saved config imports the fixed code
        return f"fix {what} first: a rerun would repeat it; then klear-lab train {config}"
    experiment = saved.get("experiment")
    again = []
    if command := _started_by(run_dir):
        again.append(f"the command that started it: {_from_where_it_started(run_dir, command[2])}{shlex.join(command)}")
    elif experiment:
        again.append(f"from its experiment with the same overrides: {_from_where_it_started(run_dir, experiment)}"
                     f"klear-lab train {experiment} KEY=VALUE ...")
    if files == named:  # no kept copy named: a copy of the config runs the plugin files
        again.append(f"from a copy of the config under another name: cp {config} fixed.yaml && klear-lab train "
                     "fixed.yaml")
    how = f", so rerun {'; or '.join(again)}" if again else ""
    return f"fix {what} first: its saved config.yaml runs the copy of it this run kept ({run_dir / 'plugins'}){how}"


def _plugin_file(plugin: Path) -> Path:
    """The plugin file whose kept copy (``RUN/plugins/NAME-SHA8.py``) ``plugin`` is, as the run that kept it lists
    it (a rerun of a saved config whose plugin changed or is gone names the copy), else ``plugin``."""
    for _ in range(8):  # a copy that a rerun of a rerun kept
        if plugin.parent.name != "plugins" or not re.fullmatch(r".+-[0-9a-f]{8}", plugin.stem):
            return plugin
        name = plugin.stem.rsplit("-", 1)[0]
        listed = [Path(p) for p in _saved_run(plugin.parent.parent)[1]]
        found = next((p for p in listed if p.stem == name or p.name == plugin.name), plugin)
        if found == plugin:
            return plugin
        plugin = found
    return plugin


def _saved_run(run_dir: Path) -> tuple[dict[str, Any], list[str]]:
    """``run:`` and ``plugins:`` of ``run_dir``'s saved ``config.yaml`` (empty when unreadable)."""
    import yaml

    try:
        saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return {}, []
    saved = saved if isinstance(saved, dict) else {}
    run, plugins = saved.get("run"), saved.get("plugins")
    return (run if isinstance(run, dict) else {}), [str(p) for p in plugins] if isinstance(plugins, list) else []


def _started_by(run_dir: Path) -> list[str] | None:
    """The ``klear-lab train EXPERIMENT ...`` command ``run.json`` records (runs since the fifty-first session),
    where it names an experiment, not a saved ``config.yaml`` (whose rerun runs the kept plugin copy again)."""
    from klear_lab.resume import read_record

    try:
        command = recorded_command(read_record(run_dir / "run.json"))
    except Exception:  # noqa: BLE001 - a damaged record: the advice goes without it
        return None
    ok = command is not None and len(command) >= 3
    return command if ok and command[1] == "train" and Path(command[2]).name != "config.yaml" else None


def recorded_command(record: dict[str, Any]) -> list[str] | None:
    """``run.json``'s ``command`` (runs the CLI started since the fifty-first session), if it is a list of words."""
    command = record.get("command")
    return command if isinstance(command, list) and all(isinstance(w, str) for w in command) else None


def _from_where_it_started(run_dir: Path, experiment: str) -> str:
    """``cd DIR && `` where the run started in another directory than this one and names its experiment by a
    relative path (read from the working directory, as its data paths are), else nothing."""
    from klear_lab.resume import read_record

    try:
        started_in = read_record(run_dir / "run.json").get("work_dir")
    except Exception:  # noqa: BLE001 - a damaged record: the advice goes without it
        return ""
    if Path(experiment).is_absolute() or not started_in or Path(started_in) == Path.cwd():
        return ""
    return f"cd {shlex.quote(str(started_in))} && "


def check_data_files_here(run_dir: Path, cfg: dict[str, Any]) -> None:
    """Before ``klear-lab resume`` reads its data: a data file the run's config names that is not there (moved,
    renamed) fails the run with "no such file", and a resume refuses a new path (it keeps its config). Say how to
    go on: put the file, or a symlink to it, back where the config names it, relative to the directory the run
    started in (``run.json``'s ``work_dir``), whose records the resume checks against the run's data digests.

    Raises:
        DataError: a data file is missing, naming it as the run's error does, with that advice.
    """
    from klear_lab.builders import unavailable_data
    from klear_lab.errors import DataError

    try:
        missing = [(key, text) for key, text in unavailable_data(cfg)  # a hub id offline: the hub, not a file
                   if "no such file" in text and "as a hub id" not in text]
    except Exception:  # noqa: BLE001 - the run itself says what is wrong with a source
        return
    if missing:
        named = "; ".join(f"{key}: data file {text}" for key, text in missing)  # as the run's own error
        raise DataError(f"{named}. {put_back(run_dir, [text.split(': ', 1)[0] for _, text in missing])}")


def put_back(run_dir: Path, paths: list[str]) -> str:
    """How a resume goes on without the files at ``paths`` (as the run's config names them)."""
    import os

    from klear_lab.resume import read_record

    try:
        started_in = read_record(run_dir / "run.json").get("work_dir") or os.getcwd()
    except Exception:  # noqa: BLE001 - a damaged record: the resume's own checks said so already
        started_in = os.getcwd()
    where = [os.path.normpath(Path(started_in) / Path(p).expanduser()) for p in paths]
    resume = f"klear-lab resume {shlex.quote(str(run_dir.resolve()))}"
    if Path(started_in) != Path.cwd() and all(Path(w).exists() for w in where):
        return (f"The run started in {started_in} (run.json's work_dir), where its config's relative paths lead and "
                f"the files are: resume from there (cd {shlex.quote(str(started_in))} && {resume})")
    cd = "" if Path(started_in) == Path.cwd() else f"cd {shlex.quote(str(started_in))} && "
    return (f"A resumed run keeps its config, whose relative paths are read from the directory the run started in "
            f"({started_in}, run.json's work_dir): put the file, or a symlink to it (ln -s NEW_PATH OLD_PATH), back "
            f"at {', '.join(where)}, and resume ({cd}{resume}); the resume checks that it holds the records the run "
            "started with (run.json's data digests)")
