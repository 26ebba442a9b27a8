"""A run's Lightning loggers: the CSV logger (``csv/metrics.csv``) and W&B's (offline by default), W&B's mode,
tags and the finish of a failed run's W&B run.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Any

from klear_lab.tracking import csv_rows


def make_loggers(cfg: dict[str, Any], run_dir: Path, identity: dict[str, Any]) -> list:
    """Lightning's CSVLogger and WandbLogger (offline unless the config says online); a resumed run's W&B
    logger first logs the kept rows W&B lost and then leaves out what W&B has (:mod:`klear_lab.wandb_resume`)."""
    loggers: list = []
    kept = run_dir / "csv" / "metrics.csv"  # a resumed run's rows up to its checkpoint
    kept_rows = csv_rows(kept) if kept.is_file() else []
    if cfg["tracking"]["csv"]:
        loggers.append(csv_logger(run_dir, kept_rows))
    wb, mode = cfg["tracking"]["wandb"], wandb_mode(cfg)
    if mode != "disabled":  # wandb is imported only then (a second and more; not installed, say, on a GPU box)
        from klear_lab.wandb_resume import ResumedWandbLogger, logged_in_wandb

        run, resumed = cfg["run"], identity.get("attempts", 1) > 1
        logger = ResumedWandbLogger(
            logged=logged_in_wandb(run_dir) if resumed else {},
            name=run_dir.name, id=identity["run_id"], save_dir=str(run_dir), project=wb["project"],
            entity=wb["entity"], offline=mode == "offline", group=identity["group"],
            job_type=identity["job_type"], tags=wandb_tags(identity["tags"]), notes=run["notes"] or None,
            config={**cfg, "_identity": identity}, log_model=False, reinit="finish_previous",
            # the mode said to wandb.init: W&B keeps the mode of the first run in a process otherwise
            mode=mode, settings={"silent": True, "console": "off"},
        )
        # Lightning always passes anonymous=None to wandb.init, which recent wandb answers with a
        # deprecation warning in every run's log ("The anonymous setting has no effect").
        getattr(logger, "_wandb_init", {}).pop("anonymous", None)
        if resumed:
            logger.backfill(kept_rows)
        loggers.append(logger)
    return loggers


def wandb_mode(cfg: dict[str, Any]) -> str:
    """The mode a run's W&B logs in: ``tracking.wandb.mode``, except that ``WANDB_MODE`` offline (or
    dryrun) or disabled in the environment turns an online config offline or off, as W&B itself does
    (the test command sets it); ``disabled`` when ``tracking.wandb.enabled`` is false."""
    wb, env = cfg["tracking"]["wandb"], os.environ.get("WANDB_MODE")
    if not wb["enabled"]:
        return "disabled"
    if wb["mode"] == "online" and env in ("offline", "dryrun", "disabled"):
        return "disabled" if env == "disabled" else "offline"
    return wb["mode"]


def finish_wandb_run(exit_code: int) -> None:
    """Finish this process's W&B run, if one is open (a failed run's: W&B marks it failed)."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and wandb.run is not None:
        wandb.run.finish(exit_code=exit_code)


def csv_logger(run_dir: Path, rows: list[dict[str, str]]):
    """Lightning's CSVLogger on ``run_dir/csv/metrics.csv``, keeping ``rows``, those a resumed run already has.

    Lightning's writer deletes an existing ``metrics.csv`` when it starts and rewrites it in place when a
    new metric appears: a kill then lost its rows. :class:`klear_lab.csv_log.KeepingCSVLogger` replaces
    the file whole with the kept rows at once (a resumed run has also kept the whole old file as
    ``metrics.before-resume-N.csv``) and changes its header the same way.
    """
    from klear_lab.csv_log import KeepingCSVLogger

    logger = KeepingCSVLogger(save_dir=str(run_dir), name="csv", version="", kept=rows)
    if rows:
        logger.experiment  # noqa: B018 - the writer puts them back on disk at once
    return logger


WANDB_TAG_MAX = 64  # W&B refuses a run whose tags are longer (at its first log, after the work is done)


def wandb_tags(tags: list[Any]) -> list[str]:
    """Tags W&B accepts: at most 64 characters (a longer one keeps its start and a hash of the whole),
    none empty, no repeats. ``run.json`` keeps the full tags."""
    out: list[str] = []
    for tag in map(str, tags):
        if len(tag) > WANDB_TAG_MAX:
            tag = f"{tag[:WANDB_TAG_MAX - 9]}~{hashlib.sha256(tag.encode()).hexdigest()[:8]}"
        if tag and tag not in out:
            out.append(tag)
    return out
