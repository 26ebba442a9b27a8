"""A sweep entry's ``metrics:`` map: the metric each paper benchmark is compared on, which way it is better,
and whether the sweep keeps that metric in every trial.

An entry maps a benchmark to a metric name, higher being better as for the paper's scores, or to
``{metric: NAME, direction: lower}`` for one where lower is better (``val/acc_drawdown``: a curve's largest
fall below its best earlier evaluation, lower being steadier)::

    metrics: {AIME24 avg@32: val/acc_last5, stability (drawdown): {metric: val/acc_drawdown, direction: lower}}
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from klear_lab.errors import KlearError
from klear_lab.sweep.metrics import GAIN, PLACEHOLDER, TRAINED, is_logged, unlogged_message
from klear_lab.sweep.spec import DEFAULT_RUNNER

if TYPE_CHECKING:
    from klear_lab.analysis.spec import Analysis

HIGHER, LOWER = "higher", "lower"
DIRECTIONS = (HIGHER, LOWER)
ENTRY_KEYS = {"metric", "direction"}


def parse_metric_map(analysis: Analysis, key: str, raw: Any) -> tuple[dict[str, str], dict[str, str]]:
    """(paper benchmark -> metric, paper benchmark -> ``higher``/``lower``) of a sweep entry's ``metrics:``;
    errors name the analysis file and the key (``sweeps[0].metrics.B.direction``)."""
    if not isinstance(raw or {}, dict):
        raise analysis.err(key, f"expected a mapping of paper benchmark -> sweep metric, got {raw!r}")
    metrics, directions = {}, {}
    for bench, value in (raw or {}).items():
        metrics[str(bench)], directions[str(bench)] = _metric_entry(analysis, f"{key}.{bench}", value)
    return metrics, directions


def _metric_entry(analysis: Analysis, key: str, value: Any) -> tuple[str, str]:
    """``val/acc`` -> (``val/acc``, ``higher``); ``{metric: M, direction: D}`` -> (M, D), D checked."""
    if isinstance(value, str):
        return value, HIGHER
    if not isinstance(value, dict) or "metric" not in value or set(value) - ENTRY_KEYS:  # a list, a number, none
        raise analysis.err(key, f"expected a metric name or {{metric: NAME, direction: higher or lower}}, "
                                f"got {value!r}")
    direction = value.get("direction", HIGHER)
    if direction not in DIRECTIONS:
        raise analysis.err(f"{key}.direction", f"expected higher or lower, got {direction!r}")
    return str(value["metric"]), direction


def optimize(direction: str) -> str:
    """``maximize`` or ``minimize`` (as a sweep's objective and a verdict read it) for ``higher``/``lower``."""
    return "minimize" if direction == LOWER else "maximize"


def keeps_metric(sweep: Any, metric: str) -> bool:
    """Whether the completed trials of ``sweep`` hold ``metric``: its objective and ``metrics:`` (read back
    from a run's metrics.csv when the run did not return them), and, for a ``run_experiment`` sweep, a final
    metric every run of its kind returns and a trial keeps (``sweep/trial.py``): :func:`always_returned`.
    A per-source one (``val/aime24/acc_last5``) exists only under the sweep's labels, and some only under some
    settings (``val/pass_at_k`` with samples): the spec names them, so a mistyped label is refused here, not
    after the sweep. A custom ``runner:`` returns metrics of its own: only those the spec names."""
    if metric in (sweep.metric, *sweep.metrics):
        return True
    return sweep.runner == DEFAULT_RUNNER and metric in always_returned(_run_kind(sweep))


def always_returned(kind: str | None) -> tuple[str, ...]:
    """The final metrics every ``run_experiment`` run of ``kind`` returns, whatever its settings: the held-out
    evaluation's pooled ones, a training run's counts and times, and an RL run's curve summary over all
    held-out problems (``GAIN`` without a ``<source>``)."""
    evaluation = ("val/acc", "val/acc_macro", "val/n")
    if kind == "eval":
        return (*evaluation, "perf/eval_seconds", "perf/torch_threads")
    trained = (*evaluation, *TRAINED, "data/records")
    if kind == "rl":
        return (*trained, *(name for name in GAIN if not PLACEHOLDER.search(name)))
    return trained if kind == "sft" else ()


def _run_kind(sweep: Any) -> str | None:
    """``run.kind`` of the sweep's composed experiment; None where it does not compose here."""
    try:
        return sweep.compose()["run"]["kind"]
    except (KlearError, OSError):
        return None


def check_metrics(analysis: Analysis, key: str, sweep: Any, metrics: dict[str, str]) -> None:
    """Each mapped benchmark is one of the analysis's, and its metric one the sweep keeps per trial
    (:func:`keeps_metric`; any other name would compare nothing)."""
    recorded = [sweep.metric, *sweep.metrics]
    for bench, metric in metrics.items():
        if bench not in analysis.benchmarks:
            raise analysis.err(f"{key}.metrics.{bench}", f"{bench!r} is not a benchmark of this analysis "
                                                         f"(benchmarks: {', '.join(analysis.benchmarks)})")
        if keeps_metric(sweep, metric):
            continue
        kind = _run_kind(sweep) if sweep.runner == DEFAULT_RUNNER else None
        if kind is not None and not is_logged(metric, kind):
            raise analysis.err(f"{key}.metrics.{bench}", f"{Path(sweep.path).name}: {unlogged_message(metric, kind)}")
        said = (f"does not record {metric!r} (it records {', '.join(recorded)})" if kind is None else
                f"may not record {metric!r} in every trial (it records {', '.join(recorded)}, and what every run "
                "returns)")
        raise analysis.err(f"{key}.metrics.{bench}", f"{Path(sweep.path).name} {said}; add it to that sweep's "
                                                     "`metrics:`")
