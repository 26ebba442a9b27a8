"""The dry run's ``earlier run`` rows: the note a run gives at its start when an earlier run of its config and
seed stopped at a checkpoint (``resume.resumable_twins``), which ``klear-lab resume`` would continue."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def earlier_run_rows(cfg: dict[str, Any]) -> list[tuple[str, str]]:
    """One row per earlier run of ``cfg`` that stopped at a checkpoint. A run from ``model.init_from`` is named
    by the config its starting point resolves to (``starting_point.resolve_init_from``), which a dry run leaves
    unresolved: it is looked up here as the run will find it, linking nothing."""
    from klear_lab.resume import resumable_twins

    m = cfg["model"]
    if m["init_from"] and not m["name_or_path"]:
        start = _resolved_start(cfg)
        if start is None:  # trained first: no earlier run can have the config it resolves to
            return []
        cfg = {**cfg, "model": {**m, "name_or_path": str(start)}}
    return [("earlier run", f"{twin} stopped at a checkpoint: `klear-lab resume {twin}` continues it (this run "
             "starts over)") for twin in resumable_twins(cfg)]


def _resolved_start(cfg: dict[str, Any]) -> Path | None:
    """The run directory ``model.name_or_path`` will name: the starting point's completed run in its output dir,
    or where a sweep's completed one will be hard-linked there; None where it is trained first."""
    from klear_lab.start_sharing import sweep_start
    from klear_lab.starting_point import completed_parent, parent_config
    from klear_lab.tracking import config_hash, out_dir_of

    parent = parent_config(cfg)
    parent_hash = config_hash(parent)
    done, _ = completed_parent(parent, parent_hash)
    if done is not None:
        return done.resolve()
    swept = sweep_start(parent, parent_hash)
    return None if swept is None else (out_dir_of(parent) / swept.name).resolve()
