"""Sweep spec: parse and structurally check a ``sweeps/*.yaml`` file.

A spec names a base experiment, the axes to vary and how to run them::

    name: clip_variants                 # study name (default: the spec file's stem)
    experiment: ../experiments/quickstart/rl.yaml   # relative to this file
    overrides: [rl.steps=20]            # key=value applied to the base experiment (relative plugins
                                        # and model.init_from: read from this file's directory)
    axes:                               # config key -> values (grid = product of all axes)
      rl.clip.name: [ppo, clip_higher, gppo, cispo]
      data.mix.k: {values: [1, 2, 4, 0], labels: [top1, top2, top4, all]}
      optim.lr: {low: 1.0e-4, high: 1.0e-2, log: true}   # tpe/random only
    seeds: [0, 1]                       # replicates per arm (run.seed)
    objective: {metric: val/acc, direction: maximize}   # direction may be left out for an accuracy, reward
                                        # or gain (maximize), not for a loss or anything else
    metrics: [train/loss]               # extra columns of the comparison table
    baseline: {rl.clip.name: ppo}       # or an arm label such as "clip=ppo" (tpe/random: not with a
                                        # float range without a step, whose every draw is a new arm)
    sampler: grid                       # grid | tpe | random
    n_trials: 20                        # tpe/random only
    pruner: none                        # none | median | hyperband
    storage: null                       # SQLAlchemy URL; default sqlite in the sweep dir
    workers: 1                          # parallel trials per sweep process (cores split evenly)
    wandb: {project: klear-lab, group: null}   # group defaults to the sweep name
    out_dir: sweep_runs                 # sweep directory = out_dir/name (~ = the home directory)
    heartbeat_interval: 30              # s; a trial silent for 2 intervals is failed and retried
    max_retry: 3                        # retries of a trial whose worker died or download failed
    retry_delay_s: 30                   # a failed download's retry waits this, doubling per retry
    sampler_seed: 0                     # tpe/random
    runner: klear_lab.run:run_experiment   # or file.py:function (relative to this file)
    trial_start: preloaded              # fork trials from a server that imported torch & co. once,
                                        # or ``fresh``: a new interpreter per trial (multi-device
                                        # trials always start fresh; see launcher.py)
    description: free text

Objective and table metrics must be names the base experiment's run kind logs (``metrics.py``;
with a custom ``runner:``, names under ``val/``, ``train/``, ``perf/``...). Checks that need the
config schema (axis keys, values, the run kind) live in ``checks.py``; ``axes:`` is parsed in ``axes.py``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from klear_lab.config.compose import compose
from klear_lab.config.layers import Layer, dotlist_layer
from klear_lab.config.yaml_io import load_yaml
from klear_lab.errors import ConfigError, did_you_mean
from klear_lab.sweep.axes import Axis, parse_axes
from klear_lab.sweep.spec_parse import Getter, check_experiment, check_sampler, parse_objective, parse_wandb

SAMPLERS = ("grid", "tpe", "random")
PRUNERS = ("none", "median", "hyperband")
TRIAL_STARTS = ("preloaded", "fresh")
DEFAULT_RUNNER = "klear_lab.run:run_experiment"
TOP_KEYS = {
    "name", "experiment", "overrides", "axes", "seeds", "objective", "metrics", "baseline", "sampler",
    "sampler_seed", "n_trials", "pruner", "storage", "workers", "wandb", "out_dir", "heartbeat_interval",
    "max_retry", "retry_delay_s", "runner", "trial_start", "description",
}


@dataclass
class SweepSpec:
    """A parsed sweep spec (see the module docstring for the YAML form)."""

    path: Path
    name: str
    experiment: Path | None
    axes: list[Axis]
    seeds: list[int]
    metric: str
    direction: str
    overrides: list[str] = field(default_factory=list)
    cli_overrides: list[str] = field(default_factory=list)  # the last of ``overrides``, for error labels
    metrics: list[str] = field(default_factory=list)
    baseline: dict[str, Any] | str | None = None
    baseline_from: str = ""  # where ``baseline`` came from when not this file (``--baseline``)
    sampler: str = "grid"
    sampler_seed: int = 0
    n_trials: int | None = None
    pruner: str = "none"
    storage: str | None = None
    workers: int = 1
    wandb_project: str | None = None
    wandb_group: str | None = None
    out_dir: Path = Path("sweep_runs")
    heartbeat_interval: int = 30
    max_retry: int = 3
    retry_delay_s: int = 30
    runner: str = DEFAULT_RUNNER
    trial_start: str = "preloaded"
    description: str = ""

    @property
    def sweep_dir(self) -> Path:
        """Where study.db, trial logs, run dirs and compare outputs live."""
        return self.out_dir / self.name

    @property
    def runs_dir(self) -> Path:
        """Absolute directory of the trials' run directories (and of a shared starting point's)."""
        return self.sweep_dir.resolve() / "runs"

    def launch_command(self, own: SweepSpec | None = None) -> str:
        """``klear-lab sweep SPEC``, with the ``--name`` / ``--out-dir`` this sweep was given where they differ
        from the spec file's own (``own``: that file as loaded, else loaded here): advice without them
        started or joined another study."""
        if own is None:
            try:
                own = load_spec(self.path)
            except Exception:  # noqa: BLE001 - the file edited or gone since: say both
                own = None
        flags = [] if own is not None and own.name == self.name else ["--name", self.name]
        if own is None or own.out_dir.resolve() != self.out_dir.resolve():
            flags += ["--out-dir", str(self.out_dir)]
        return shlex.join(["klear-lab", "sweep", str(self.path), *flags])

    def own_run_dir(self, run_dir: str | None) -> str | None:
        """The run directory of that name in this sweep's own ``runs/`` (where every trial's run is made),
        whether or not it is still there: a sweep directory moved (or copied) since keeps its trials' runs
        with it, and the recorded path is where they were. Never the recorded one: in a copy whose run is
        gone, that is the original sweep's, which a rescore or a retry would then write to."""
        return str(self.runs_dir / Path(run_dir).name) if run_dir else None

    def override_layers(self) -> list[Layer]:
        """``overrides`` as config layers labelled by where each came from (the spec or the command line),
        so an error in one names its source; the spec's relative plugins and ``model.init_from`` are read
        from the spec's directory, as its ``experiment:``."""
        own = self.overrides[:len(self.overrides) - len(self.cli_overrides)]
        cli = self.overrides[len(own):]
        return ([dotlist_layer(own, f"{self.path}: overrides", Path(self.path).resolve().parent)] if own else []) + (
            [dotlist_layer(cli)] if cli else [])

    def absolute_overrides(self, shown: Callable[[Any], Any] = lambda node: node) -> list[str]:
        """``overrides`` with their relative plugin and ``model.init_from`` paths made absolute (the spec's
        from its directory, the command line's from the working one): the frozen ``spec.yaml`` in the sweep
        directory composes as this spec does, from anywhere."""
        own = len(self.overrides) - len(self.cli_overrides)
        out = []
        for i, item in enumerate(self.overrides):
            key = item.split("=", 1)[0].strip()
            if key in ("plugins", "model", "model.init_from") or key.startswith("plugins."):  # model={init_from: x}
                base = Path(self.path).resolve().parent if i < own else Path.cwd()
                node: Any = dotlist_layer([item], base_dir=base)[1]
                for part in key.split("."):
                    node = node.get(part) if isinstance(node, dict) else None
                item = f"{key}={json.dumps(shown(node))}"
            out.append(item)
        return out

    def compose(self, extra_layers: list[Layer] | None = None) -> dict[str, Any]:
        """The base experiment with ``overrides`` (and ``extra_layers``, e.g. a trial's), composed."""
        return compose(self.experiment, None, [*self.override_layers(), *(extra_layers or [])])

    def err(self, key: str, message: str) -> ConfigError:
        """A ConfigError naming this spec file and ``key``."""
        return ConfigError(f"{self.path}: {key}: {message}")


def refuse_a_sweep_directory(path: Path) -> None:
    """A sweep's own directory (``sweep.json``) given for a spec: it is run by the spec that started it (another
    directory gets ``load_yaml``'s message)."""
    record = path / "sweep.json"
    if not record.is_file():
        return
    try:
        spec = json.loads(record.read_text()).get("spec") or f"{path / 'spec.yaml'}"
    except (OSError, ValueError, AttributeError):
        spec = f"{path / 'spec.yaml'}"
    raise ConfigError(f"{path}: a sweep directory; a sweep is run (or resumed) by its spec: klear-lab sweep "
                      f"{spec} (the copy it froze: {path / 'spec.yaml'}); its table: klear-lab compare {path}")


def load_spec(path: str | Path, cli_overrides: list[str] | None = None, name: str | None = None,
              check_base: bool = False) -> SweepSpec:
    """Parse ``path`` (structure only: no config composition, no storage access).

    Args:
        path: the spec YAML.
        cli_overrides: ``key=value`` from the ``klear-lab sweep`` command line; they apply to the
            base experiment after the spec's own ``overrides``.
        name: replaces the spec's ``name`` (the study name).
        check_base: refuse an ``experiment:`` file that does not exist (:func:`check_experiment`), for the
            commands that compose trials; reading a finished sweep's results (``compare``, ``reproduce``)
            needs no base experiment.
    """
    path = user_path(path)
    refuse_a_sweep_directory(path)
    raw = load_yaml(path, "a sweep spec names at least its `experiment:`, `axes:` and `objective:`",
                    "a sweep spec YAML file")
    unknown = sorted(set(map(str, raw)) - TOP_KEYS)
    if unknown:
        if set(unknown) & {"run", "model", "data", "sft", "rl", "trainer", "optim"}:
            raise ConfigError(f"{path}: an experiment config (keys {', '.join(unknown[:4])}), not a sweep spec: a "
                              "spec names its experiment with `experiment: FILE` (see sweeps/quickstart.yaml)")
        if set(unknown) & {"benchmarks", "paper", "claims", "sweeps"}:
            raise ConfigError(f"{path}: an analysis spec (keys {', '.join(unknown[:4])}), not a sweep spec: "
                              f"`klear-lab reproduce {path}` shows it next to the results of the sweeps it names")
        raise ConfigError(f"{path}: unknown key {unknown[0]!r}{did_you_mean(unknown[0], TOP_KEYS)}; "
                          f"allowed: {', '.join(sorted(TOP_KEYS))}")
    get = Getter(path, raw)
    flag, name = name is not None, get.text("name", path.stem) if name is None else name  # flag: --name gave it
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", name) or not name.strip("."):  # "..": the output dir's parent
        raise ConfigError(f"{'--name' if flag else f'{path}: name:'} {name!r} must use letters, digits, '_', '-', "
                          "'.' only, not dots alone")
    experiment = get.text("experiment", "") or None
    spec = SweepSpec(
        path=path, name=name,
        experiment=_relative_to(path, experiment) if experiment else None,
        axes=parse_axes(path, raw.get("axes")),
        seeds=get.integers("seeds", [0]),
        metric="", direction="maximize",
        overrides=get.strings("overrides", []) + list(cli_overrides or []),
        cli_overrides=list(cli_overrides or []),
        metrics=get.strings("metrics", []),
        baseline=raw.get("baseline"),
        sampler=get.choice("sampler", SAMPLERS, "grid"),
        sampler_seed=get.integer("sampler_seed", 0, minimum=0),
        n_trials=raw.get("n_trials"),
        pruner=get.choice("pruner", PRUNERS, "none"),
        storage=get.text("storage", "") or None,
        workers=get.integer("workers", 1, minimum=1),
        out_dir=user_path(get.text("out_dir", "sweep_runs")),
        heartbeat_interval=get.integer("heartbeat_interval", 30, minimum=1),
        max_retry=get.integer("max_retry", 3, minimum=0),
        retry_delay_s=get.integer("retry_delay_s", 30, minimum=0),
        runner=_runner(path, get.text("runner", DEFAULT_RUNNER)),
        trial_start=get.choice("trial_start", TRIAL_STARTS, "preloaded"),
        description=get.text("description", ""),
    )
    if check_base and experiment:
        check_experiment(path, experiment, spec.experiment)
    spec.metric, spec.direction = parse_objective(path, raw.get("objective"))
    spec.wandb_project, spec.wandb_group = parse_wandb(path, raw.get("wandb"))
    check_sampler(spec)
    return spec


def with_baseline(spec: SweepSpec, text: str | None) -> SweepSpec:
    """``spec`` with ``klear-lab compare --baseline TEXT`` as its ``baseline:`` (an arm label such as
    ``clip=gppo``, or a YAML mapping such as ``{rl.clip.name: gppo}``), read and checked as the spec's own is
    (``baseline_checks.cli_baseline``): a wrong one names ``--baseline`` and lists the arms. ``text`` None:
    ``spec`` unchanged.

    Raises:
        ConfigError: not a label or mapping, an unknown axis key, or no such arm.
    """
    from klear_lab.sweep.baseline_checks import cli_baseline

    return spec if text is None else cli_baseline(spec, text)


def user_path(value: str | Path) -> Path:
    """A directory or file the user gave, ``~`` expanded as ``tracking.out_dir_of`` does for ``run.out_dir``:
    no shell expands it in a YAML file, a quoted argument or ``--out-dir=~/x``."""
    return Path(os.path.expanduser(str(value)))


def _relative_to(spec_path: Path, target: str) -> Path:
    p = user_path(target)
    return p if p.is_absolute() else Path(os.path.normpath(spec_path.parent / p))


def _runner(spec_path: Path, runner: str) -> str:
    """``file.py:function`` paths are relative to the spec file; ``module:function`` stays as is."""
    module, _, attr = runner.rpartition(":")
    if not module or not attr:
        raise ConfigError(f"{spec_path}: runner: {runner!r} must look like module:function or "
                          "file.py:function")
    if module.endswith(".py"):
        module = str(_relative_to(spec_path, module).resolve())
    return f"{module}:{attr}"
