"""Analysis spec: one paper table or figure, its numbers, its claims and the sweeps that reproduce it.

An ``analysis/*.yaml`` file::

    title: "Figure 2: GPPO vs clip-higher vs CISPO (math RL)"
    source: paper.md §4.3 (read off the figure: mean of the last 5 evals)
    benchmarks: [AIME24 avg@32, LCB V5 avg@4]
    paper:                              # paper arm -> one value per benchmark (null = not reported)
      clip_higher: [0.791, 0.585]
      gppo: [0.813, 0.589]
    baseline: clip_higher               # deltas are taken against this paper arm
    claims:                             # the paper's conclusions, each "better beats than"
      - {better: gppo, than: clip_higher, text: GPPO beats clip-higher}
    sweeps:                             # sweeps that reproduce it; the first with results is the default
      - ../sweeps/quickstart.yaml       # sweep arms matched to paper arms by label or axis value
      - {spec: ../sweeps/paper/fig2_clip.yaml, arms: {"clip=clip_higher": clip_higher}}

A table whose sweep logs each benchmark (eval sources with a ``label``: ``val/<label>/acc``) also
maps paper benchmarks to those metrics (``analysis/table4_topk.yaml``)::

    sweeps:
      - spec: ../sweeps/paper/table4_topk.yaml
        metrics: {AIME 2024: val/aime24/acc, AIME 2025: val/aime25/acc}   # paper benchmark -> sweep metric

A sweep arm matches a paper arm through the sweep entry's ``arms`` map, else when its label is a
paper arm (``top1``), else when it is a one-axis label whose value is one (``clip=gppo`` ->
``gppo``). A benchmark named in ``metrics`` is also compared on that metric; the metric must be
one the sweep keeps per trial (``benchmark_metrics.keeps_metric``: its objective, its ``metrics:`` list, or
for a ``run_experiment`` sweep a final metric every run of its kind returns, such as an RL run's
``val/acc_last5``), higher being better unless the entry says ``{metric: val/acc_drawdown, direction: lower}``
(:mod:`klear_lab.analysis.benchmark_metrics`). Benchmarks left out are compared on the objective only.

A claim is judged on the sweep's objective and on each mapped benchmark the paper prints a number for; one
naming a ``benchmark:`` is judged on that benchmark's metric alone, in its direction, even where the paper
prints no number for it (a directional claim: Figure 2's "more stable", on a drawdown). Every check here
runs without touching a study, so ``--validate-only`` style tests can load every shipped analysis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from klear_lab.analysis.benchmark_metrics import HIGHER, check_metrics, parse_metric_map
from klear_lab.config.yaml_io import load_yaml
from klear_lab.errors import ConfigError, did_you_mean
from klear_lab.sweep.spec import user_path

TOP_KEYS = {"title", "source", "benchmarks", "paper", "baseline", "claims", "sweeps", "description"}
SWEEP_KEYS = {"spec", "arms", "metrics"}
CLAIM_KEYS = {"better", "than", "text", "benchmark"}


@dataclass(frozen=True)
class Claim:
    """The paper's conclusion that arm ``better`` beats arm ``than``: on one ``benchmark``, or ("") in general."""

    better: str
    than: str
    text: str = ""
    benchmark: str = ""


@dataclass
class SweepRef:
    """One sweep that reproduces the analysis, with its arm label -> paper arm map and its paper
    benchmark -> sweep metric map."""

    spec_path: Path
    arms: dict[str, str] = field(default_factory=dict)
    labels: list[str] = field(default_factory=list)  # the sweep's grid arm labels
    label_of: dict[str, str] = field(default_factory=dict)  # paper arm -> the sweep arm standing for it
    metrics: dict[str, str] = field(default_factory=dict)  # paper benchmark -> a metric the sweep records
    name: str = ""  # the sweep's (study) name
    directions: dict[str, str] = field(default_factory=dict)  # paper benchmark -> higher or lower (is better)

    def direction(self, bench: str) -> str:
        """``higher`` or ``lower``: which way is better on the metric mapped to ``bench``."""
        return self.directions.get(bench, HIGHER)

    def paper_arm(self, label: str, paper_arms: list[str]) -> str | None:
        """The paper arm a sweep arm label stands for, or None."""
        if label in self.arms:
            return self.arms[label]
        if label in paper_arms:
            return label
        key, sep, value = label.partition("=")
        if sep and "," not in label and value in paper_arms:
            return value
        return None


@dataclass
class Analysis:
    """A parsed analysis spec (see the module docstring)."""

    path: Path
    title: str
    source: str
    benchmarks: list[str]
    paper: dict[str, list[float]]
    baseline: str
    claims: list[Claim]
    sweeps: list[SweepRef]
    description: str = ""

    @property
    def name(self) -> str:
        return self.path.stem

    def err(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"{self.path}: {key}: {message}")


def load_analysis(path: str | Path) -> Analysis:
    """Parse and check ``path``; sweep specs are loaded to check their arm labels."""
    path = user_path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such analysis spec")
    raw = load_yaml(path, "an analysis spec names its `title:`, `benchmarks:`, `paper:`, `baseline:` and `sweeps:`")
    unknown = sorted(set(map(str, raw)) - TOP_KEYS)
    if unknown:
        raise _unknown_keys(path, unknown)
    for key in ("title", "benchmarks", "paper", "baseline", "sweeps"):
        if raw.get(key) in (None, "", [], {}):
            raise ConfigError(f"{path}: {key}: required")
    benchmarks = _strings(path, "benchmarks", raw["benchmarks"])
    if len(set(benchmarks)) != len(benchmarks):
        raise ConfigError(f"{path}: benchmarks: names must be distinct, got {benchmarks}")
    analysis = Analysis(
        path=path, title=str(raw["title"]), source=str(raw.get("source") or ""), benchmarks=benchmarks,
        paper=_paper(path, raw["paper"], len(benchmarks)), baseline=str(raw["baseline"]),
        claims=[], sweeps=[], description=str(raw.get("description") or ""),
    )
    if analysis.baseline not in analysis.paper:
        raise analysis.err("baseline", f"{analysis.baseline!r} is not a paper arm ({', '.join(analysis.paper)})")
    analysis.claims = [_claim(analysis, i, c) for i, c in enumerate(_list(path, "claims", raw.get("claims") or []))]
    analysis.sweeps = [_sweep_ref(analysis, i, s) for i, s in enumerate(_list(path, "sweeps", raw["sweeps"]))]
    _check_coverage(analysis)
    return analysis


SWEEP_SPEC_KEYS = {"axes", "experiment", "seeds", "objective", "sampler"}


def _unknown_keys(path: Path, unknown: list[str]) -> ConfigError:
    """The refusal of an analysis spec's unknown top-level keys; a sweep spec given to ``reproduce`` (one of
    its own keys is unknown here) is told apart, with the command it is for."""
    if set(unknown) & SWEEP_SPEC_KEYS:
        return ConfigError(f"{path}: a sweep spec (keys {', '.join(unknown[:4])}), not an analysis spec: run it "
                           f"with `klear-lab sweep {path}`, then `klear-lab reproduce` an analysis spec that "
                           "names it under `sweeps:` (see analysis/fig2_clip.yaml)")
    return ConfigError(f"{path}: unknown key {unknown[0]!r}{did_you_mean(unknown[0], TOP_KEYS)}; "
                       f"allowed: {', '.join(sorted(TOP_KEYS))}")


def _list(path: Path, key: str, value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ConfigError(f"{path}: {key}: expected a list, got {value!r}")
    return value


def _strings(path: Path, key: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{path}: {key}: expected a list of strings, got {value!r}")
    return list(value)


def _paper(path: Path, raw: Any, width: int) -> dict[str, list[float]]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: paper: expected a mapping of arm -> values, got {raw!r}")
    out = {}
    for arm, values in raw.items():
        where = f"{path}: paper.{arm}"
        if not isinstance(values, list) or len(values) != width:
            raise ConfigError(f"{where}: expected {width} values (one per benchmark), got {values!r}")
        bad = [v for v in values if v is not None and (isinstance(v, bool) or not isinstance(v, int | float))]
        if bad:
            raise ConfigError(f"{where}: expected numbers or null, got {bad[0]!r}")
        out[str(arm)] = [math.nan if v is None else float(v) for v in values]
    return out


def _claim(analysis: Analysis, i: int, raw: Any) -> Claim:
    key = f"claims[{i}]"
    if not isinstance(raw, dict) or not {"better", "than"} <= set(raw) or set(raw) - CLAIM_KEYS:
        raise analysis.err(key, f"expected {{better: ARM, than: ARM, text: ..., benchmark: BENCHMARK}}, got {raw!r}")
    claim = Claim(str(raw["better"]), str(raw["than"]), str(raw.get("text") or ""), str(raw.get("benchmark") or ""))
    if claim.benchmark and claim.benchmark not in analysis.benchmarks:
        raise analysis.err(f"{key}.benchmark", f"{claim.benchmark!r} is not a benchmark of this analysis "
                                               f"(benchmarks: {', '.join(analysis.benchmarks)})")
    for side in ("better", "than"):
        if getattr(claim, side) not in analysis.paper:
            raise analysis.err(f"{key}.{side}", f"{getattr(claim, side)!r} is not a paper arm "
                                                f"({', '.join(analysis.paper)})")
    if claim.better == claim.than:
        raise analysis.err(key, f"compares {claim.better!r} with itself")
    return claim


def _sweep_ref(analysis: Analysis, i: int, raw: Any) -> SweepRef:
    key = f"sweeps[{i}]"
    if isinstance(raw, str):
        raw = {"spec": raw}
    if not isinstance(raw, dict) or "spec" not in raw or set(raw) - SWEEP_KEYS:
        raise analysis.err(key, "expected a spec path or {spec: PATH, arms: {LABEL: PAPER_ARM}, "
                                f"metrics: {{BENCHMARK: METRIC}}}}, got {raw!r}")
    spec_path = user_path(raw["spec"])
    if not spec_path.is_absolute():
        spec_path = (analysis.path.parent / spec_path).resolve()
    arms = _mapping(analysis, f"{key}.arms", raw.get("arms"), "sweep arm label -> paper arm")
    metrics, directions = parse_metric_map(analysis, f"{key}.metrics", raw.get("metrics"))
    sweep, labels = _load_sweep(analysis, key, spec_path)
    check_metrics(analysis, key, sweep, metrics)
    ref = make_ref(analysis, key, spec_path, arms, labels, metrics, directions)
    ref.name = sweep.name
    return ref


def _mapping(analysis: Analysis, key: str, raw: Any, what: str) -> dict[str, str]:
    if not isinstance(raw or {}, dict):
        raise analysis.err(key, f"expected a mapping of {what}, got {raw!r}")
    return {str(k): str(v) for k, v in (raw or {}).items()}


def make_ref(analysis: Analysis, key: str, spec_path: Path, arms: dict[str, str], labels: list[str],
             metrics: dict[str, str] | None = None, directions: dict[str, str] | None = None) -> SweepRef:
    """A checked SweepRef: map entries are real arms and paper arms, one sweep arm per paper arm,
    and some sweep arm stands for the baseline (``metrics`` and their ``directions`` are checked by the caller)."""
    ref = SweepRef(spec_path, arms, labels, metrics=dict(metrics or {}), directions=dict(directions or {}))
    for label, arm in ref.arms.items():
        if label not in labels:
            raise analysis.err(f"{key}.arms.{label}", f"not an arm of {spec_path.name} (arms: {', '.join(labels)})")
        if arm not in analysis.paper:
            raise analysis.err(f"{key}.arms.{label}", f"{arm!r} is not a paper arm ({', '.join(analysis.paper)})")
    matched, claimed = ref.label_of, set(ref.arms.values())
    for label in labels:
        arm = ref.paper_arm(label, list(analysis.paper))
        if arm is None or (label not in ref.arms and arm in claimed):  # an `arms:` entry beats a name match
            continue
        if arm in matched:
            raise _double_match(analysis, key, spec_path, ref, (matched[arm], label), arm)
        matched[arm] = label
    if analysis.baseline not in matched:
        raise analysis.err(key, f"no arm of {spec_path.name} matches the baseline {analysis.baseline!r} "
                                f"(arms: {', '.join(labels)}); map one with `arms:`")
    return ref


def _double_match(analysis: Analysis, key: str, spec_path: Path, ref: SweepRef, labels: tuple[str, str],
                  arm: str) -> ConfigError:
    """Two sweep arms stand for one paper arm: by name (map one with ``arms:``), or both by ``arms:``
    entries (the advice to map one explicitly would point at the mistake itself)."""
    first, second = labels
    if first in ref.arms and second in ref.arms:
        return analysis.err(f"{key}.arms", f"entries {first!r} and {second!r} both map sweep arms of "
                                           f"{spec_path.name} to paper arm {arm!r}; one sweep arm stands for each "
                                           "paper arm: point one of them at another paper arm, or drop it")
    return analysis.err(key, f"arms {first!r} and {second!r} of {spec_path.name} both match "
                             f"paper arm {arm!r}; map one explicitly with `arms:`")


def _load_sweep(analysis: Analysis, key: str, spec_path: Path) -> tuple[Any, list[str]]:
    """A sweep spec file and its grid arm labels (errors name the analysis key)."""
    from klear_lab.sweep.spec import load_spec

    if not spec_path.is_file():
        raise analysis.err(key, f"{spec_path}: no such sweep spec")
    try:
        sweep = load_spec(spec_path)
        return sweep, grid_labels(sweep)
    except ConfigError as exc:
        raise analysis.err(key, str(exc)) from exc


def grid_labels(spec: Any) -> list[str]:
    """The arm labels of a loaded grid sweep spec; other samplers have no fixed arms to match."""
    from klear_lab.sweep.grid import grid_arms

    if spec.sampler != "grid":
        raise ConfigError(f"{spec.path}: sampler {spec.sampler!r}; a reproduction needs a grid sweep")
    return [arm.label for arm in grid_arms(spec)]


def _check_coverage(analysis: Analysis) -> None:
    """Every paper arm is matched by some sweep (a typo in an arm name fails here), and every benchmark a
    claim names is mapped to a metric by some sweep entry (else that claim would never be judged)."""
    matched = {arm for ref in analysis.sweeps for arm in ref.label_of}
    missing = [arm for arm in analysis.paper if arm not in matched]
    if missing:
        raise analysis.err("paper", f"arm {missing[0]!r} is matched by no sweep arm; name it in a sweep's `arms:` map")
    mapped = {bench for ref in analysis.sweeps for bench in ref.metrics}
    for i, claim in enumerate(analysis.claims):
        if claim.benchmark and claim.benchmark not in mapped:
            raise analysis.err(f"claims[{i}].benchmark", f"no sweep entry maps {claim.benchmark!r} to a metric: "
                                                         "add it to a sweep entry's `metrics:`")
