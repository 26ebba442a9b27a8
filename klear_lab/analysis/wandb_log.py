"""Log a reproduction as its own W&B run in the sweep's group (job type ``reproduce``).

The trials of a sweep are W&B runs grouped by sweep; the reproduction joins that group with the
arms and claims tables (and the per-benchmark claims when benchmarks are mapped), the delta figure
and the verdict counts in its summary, so a dashboard shows the paper's numbers and the verdicts
next to the runs they came from. W&B settings (mode, project, entity) are the sweep's base
experiment's, offline by default like every run.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from klear_lab.analysis.reproduce import Reproduction


def wandb_settings(rep: Reproduction) -> dict:
    """``tracking.wandb`` of the sweep's trials: the frozen spec's experiment and overrides (CLI
    overrides at sweep time included) when the sweep directory has one, with the spec's project."""
    from klear_lab.sweep.spec import load_spec

    frozen = rep.sweep.sweep_dir / "spec.yaml"
    spec = load_spec(frozen) if frozen.is_file() else rep.sweep
    wb = dict(spec.compose()["tracking"]["wandb"])
    if spec.wandb_project:
        wb["project"] = spec.wandb_project
    return wb


def log_reproduction(rep: Reproduction, out_dir: Path, png: Path | None) -> tuple[Path, str | None] | None:
    """One W&B run with the tables, figure and verdict counts: (local directory, URL when online),
    or None when the sweep's runs have W&B off."""
    wb = wandb_settings(rep)
    if not wb["enabled"] or wb["mode"] == "disabled":
        return None
    import wandb

    verdicts = Counter(v.split(" (")[0].replace(" ", "_") for v in rep.claims.get("verdict", []))
    run = wandb.init(
        project=wb["project"], entity=wb["entity"], mode=wb["mode"], dir=str(out_dir),
        group=rep.sweep.wandb_group or rep.sweep.name, job_type="reproduce",
        name=f"reproduce-{rep.analysis.name}", tags=[f"analysis={rep.analysis.name}", f"sweep={rep.sweep.name}"],
        config={"analysis": str(rep.analysis.path), "title": rep.analysis.title, "source": rep.analysis.source,
                "sweep": rep.sweep.name, "objective": rep.sweep.metric, "direction": rep.sweep.direction,
                "paper": rep.analysis.paper, "benchmarks": rep.analysis.benchmarks,
                "benchmark_metrics": rep.metrics, "benchmark_directions": rep.directions,
                "ours_on": rep.scale.short, "scale": rep.scale.line},
        settings=wandb.Settings(silent=True, console="off"), reinit="finish_previous",
    )
    try:
        payload = {"reproduce/arms": wandb.Table(dataframe=rep.arms)}
        if not rep.claims.empty:
            payload["reproduce/claims"] = wandb.Table(dataframe=rep.claims)
        if not rep.benchmarks.empty:
            payload["reproduce/benchmarks"] = wandb.Table(dataframe=rep.benchmarks)
        if png is not None:
            payload["reproduce/deltas"] = wandb.Image(str(png))
        run.log(payload)
        run.summary.update({f"reproduce/{k}": verdicts.get(k, 0)
                            for k in ("reproduced", "contradicted", "inconclusive", "no_result")}
                           | {"reproduce/trials_complete": rep.n_complete})
    except BaseException:
        run.finish(exit_code=1)
        raise
    run.finish()
    return Path(run.dir).parent, (run.url if wb["mode"] == "online" else None)
