"""A resumed run's record: each attempt counted in ``run.json``, with its code commit and software versions,
and a warning when they, or the directory it runs from, differ from the attempt before."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from klear_lab.errors import ConfigError
from klear_lab.resume import read_record
from klear_lab.run_owner import PROCESS_KEYS


def saved_identity(run_dir: Path) -> dict[str, Any]:
    """``run.json`` without its status, with one more attempt counted and its code commit recorded, and the
    run's directory where it is now (a run moved or copied elsewhere and resumed there named its old place)."""
    identity = read_record(run_dir / "run.json")
    identity = {k: v for k, v in identity.items() if k not in ("status", "error", *PROCESS_KEYS)}
    if not identity.get("run_dir") or Path(identity["run_dir"]).resolve() != run_dir.resolve():
        identity["run_dir"] = str(run_dir.resolve())
    identity["attempts"] = int(identity.get("attempts", 1)) + 1
    identity["git_commits"] = attempt_commits(run_dir, identity)
    identity["software"] = attempt_software(run_dir, identity)
    return identity


def warn_if_elsewhere(run_dir: Path, doing: str = "resuming") -> None:
    """Warn when a resume (or a rerun of the run's saved config, ``doing``) runs from another directory than the
    run started in (``work_dir``): the relative paths of its config are read from the working directory.
    Before the data is read, whose error it explains."""
    import yaml

    try:
        started_in = read_record(run_dir / "run.json").get("work_dir")
        cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
        relative = relative_paths(cfg)
    except (ConfigError, OSError, yaml.YAMLError, KeyError, TypeError, AttributeError):
        return  # the resume's own checks say what is wrong with run.json or config.yaml
    if not started_in or Path(started_in) == Path.cwd():
        return
    if Path(started_in).is_dir():  # a hub id looks relative too: only what lies in the run's directory
        relative = [p for p in relative if (Path(started_in) / p).exists()]
    out_dir = str(cfg.get("run", {}).get("out_dir") or "")
    if doing != "resuming" and out_dir and not os.path.isabs(os.path.expanduser(out_dir)):
        relative.append(f"run.out_dir {out_dir}: the new run goes to {Path.cwd() / out_dir}")  # a resume stays put
    if relative:
        shown = ", ".join(relative[:3]) + (", ..." if len(relative) > 3 else "")
        print(f"warning: {run_dir}: {doing} from {Path.cwd()}; the run started in {started_in}, and the relative "
              f"paths in its config.yaml ({shown}) are read from the working directory", file=sys.stderr)


def relative_paths(cfg: dict[str, Any]) -> list[str]:
    """The relative paths a config reads from the working directory: the data files a run of it reads (the
    builders' own rule: a training source's ``eval_path`` is not read, nor an eval run's training sources) and
    ``model.name_or_path``."""
    import os

    from klear_lab.builders import source_nodes, source_path

    paths = [source_path(node, split) for _, split, _, node in source_nodes(cfg)
             if isinstance(node, dict) and node.get("name") == "file"]
    paths.append(cfg["model"].get("name_or_path"))
    return list(dict.fromkeys(str(p) for p in paths if p and not os.path.isabs(os.path.expanduser(str(p)))))


def warn_if_other_data(run_dir: Path, cfg: dict[str, Any], overridden: bool = False) -> None:
    """Before a rerun of ``run_dir``'s saved config (``cfg``) trains: warn when it would read other records than
    the run did (a data file edited since, or read from another directory): the config, and so its hash, names
    files, not contents. A data error is left to the run itself, which names it. ``overridden``: ``cfg`` has
    overrides, so the saved config is read as the run had it: an override (``run.seed=1``, another mix) draws
    other records from the same files, which is no news (it warned of a data change on every seed rerun)."""
    from klear_lab.config.compose import compose
    from klear_lab.starting_point import records_digests

    try:
        then = read_record(run_dir / "run.json").get("data") or {}
        as_run = compose(run_dir / "config.yaml") if overridden and then else cfg
        now = records_digests(as_run) if then else {}
    except Exception:  # noqa: BLE001 - the run reads the same data next and reports what is wrong with it
        return
    keys = {"train": "data.sources", "eval": "data.eval_sources"}  # what run.json's data digests are of
    if changed := [f"{keys.get(k, k)}: {then[k]} then, {now[k]} now" for k in sorted(then)
                   if k in now and then[k] != now[k]]:
        print(f"warning: rerunning {run_dir / 'config.yaml'}, which reads other records than {run_dir} did "
              f"({'; '.join(changed)}): the files its config names hold other data now, or are read from another "
              "directory", file=sys.stderr)


def attempt_software(run_dir: Path, identity: dict[str, Any]) -> list[dict[str, str]]:
    """The software versions of each attempt, this one last (runs from before they were recorded have none
    for their earlier attempts). Warns on stderr naming what changed since the previous attempt."""
    from klear_lab.tracking import RECORDED_LATER, software_versions

    earlier = max(int(identity.get("attempts", 2)) - 1, 1)  # attempts before this one
    before, now = list(identity.get("software") or [{}] * earlier), software_versions()  # {}: not recorded
    last = before[-1] if before and isinstance(before[-1], dict) else None
    unrecorded = set(RECORDED_LATER) if last and "numpy" not in last else set()  # an older run's record
    changed = [f"{k} {last.get(k, '(none)')} -> {now.get(k, '(none)')}" for k in sorted({*last, *now} - unrecorded)
               if last.get(k) != now.get(k)] if last else []
    if changed:
        print(f"warning: {run_dir}: resuming with other software than the run's previous attempt: "
              f"{', '.join(changed)} (run.json records each attempt's in software)", file=sys.stderr)
    return [*before, now]


def attempt_commits(run_dir: Path, identity: dict[str, Any]) -> list[str]:
    """The code commit of each attempt, this one last (``git_commit`` stays the first attempt's): a run
    resumed on other code kept only the first commit, as if all of its steps had run on it. Warns on stderr
    when this attempt's commit is not the previous attempt's."""
    from klear_lab.git_state import git_commit

    before = identity.get("git_commits") or [identity.get("git_commit", "unknown")]
    now = git_commit()
    if now != before[-1]:
        print(f"warning: {run_dir}: resuming on code commit {now}; the run's previous attempt ran on "
              f"{before[-1]} (run.json records both in git_commits)", file=sys.stderr)
    return [*before, now]
