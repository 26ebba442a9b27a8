"""What ``klear-lab resume`` says of a sweep's trial, which it does not resume: resumed by hand, the sweep's
study would not learn of the run and would train that trial again.

What to do instead depends on the run, as ``klear-lab runs`` says it: a completed trial has nothing to
resume, nor has one its sweep's pruner stopped (the sweep counts it as finished), nor one running now; a
stopped one with a checkpoint is resumed from it by its sweep; one without a checkpoint is trained again
from the start by its sweep (the old run marked superseded); one that failed on its config or data, or
diverged, would fail so again, so the sweep spec is fixed first, and one a component's code failed, that code
(:func:`klear_lab.run_advice.fix_first`); then the sweep is rerun, which does not resume the run: what it computes
changed.
"""

from __future__ import annotations

from pathlib import Path

from klear_lab.distributed import recorded_error
from klear_lab.errors import ComponentError, ConfigError
from klear_lab.resume import check_run_dir, checkpoint_path, read_record
from klear_lab.run_advice import fix_first
from klear_lab.run_list import repeating_error
from klear_lab.run_owner import live_status
from klear_lab.sweep.run_status import SUPERSEDED


def trial_refusal(run_dir: Path, sweep: str, resuming: bool = True) -> ConfigError:
    """The error refusing to resume ``run_dir``, a trial of the sweep that the command ``sweep`` continues;
    without ``resuming`` (``klear-lab eval`` saying what continues it), not why a resume here would be wrong.

    Raises:
        ConfigError: not a run directory, or a damaged ``run.json`` (what ``klear-lab resume`` says of any run).
    """
    check_run_dir(run_dir)
    record = run_dir / "run.json"
    identity = read_record(record)
    if identity.get("status") == "completed":  # as of a run outside a sweep, not "continue the sweep"
        return ConfigError(f"{record}: the trial already completed; nothing to resume")
    if identity.get("status") == "pruned":
        return ConfigError(f"{record}: the sweep's pruner stopped this trial; the sweep counts it as finished and "
                          "does not train it again: nothing to resume")
    live = live_status(identity)
    if live == "running":  # "continue the sweep" would start a second sweep beside the one running it
        return ConfigError(f"{run_dir}: a trial of a sweep, running now (pid {identity.get('pid')}): nothing to "
                           f"resume; its sweep goes on with it ({sweep})")
    if live == "unknown":
        return ConfigError(f"{run_dir}: a trial of a sweep, recorded as running on {identity.get('host')}, whose "
                           f"processes cannot be checked from here: nothing to resume here; its sweep ({sweep}) "
                           "retries it once its heartbeat is stale")
    error = str(recorded_error(run_dir, identity) or "")
    if error.startswith(SUPERSEDED):  # the sweep already trained its point again in another run
        return ConfigError(f"{run_dir}: a trial of a sweep, {error}: nothing to resume")
    repeats = repeating_error(error)  # the cause comes first, as `klear-lab runs` says
    if repeats is not None:  # once fixed, the sweep does not resume the run (its config, data or code changed)
        fix = fix_first(repeats, run_dir, sweep)
        then = "" if issubclass(repeats, ComponentError) else f"; then rerun the sweep: {sweep}"  # (fix names it)
        return ConfigError(f"{run_dir}: a trial of a sweep, which failed with {error}: {fix}{then}")
    ckpt = checkpoint_path(run_dir)
    if ckpt.is_file():
        why = (". Resumed here, the sweep's study would not learn of it and would train that trial again"
               if resuming else "")
        return ConfigError(f"{run_dir}: a trial of a sweep: continue the sweep instead, which resumes it from its "
                           f"checkpoint: {sweep}{why}")
    return ConfigError(f"{run_dir}: a trial of a sweep: no checkpoint to resume from ({ckpt}): rerunning the sweep "
                       f"trains it again from the start: {sweep}")
