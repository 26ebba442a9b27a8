"""Helpers of ``spec.load_spec``: typed readers of a sweep spec's top-level keys, the parsers of its
``objective:`` and ``wandb:`` blocks, the sampler's rules (``check_sampler``) and the ``experiment:`` file's
(``check_experiment``), and the ``runner:`` function's (``check_runner``).

Every error names the spec file and the key.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from klear_lab.errors import ConfigError, did_you_mean

if TYPE_CHECKING:
    from klear_lab.sweep.spec import SweepSpec

DIRECTIONS = ("maximize", "minimize")


class Getter:
    """Typed access to top-level spec keys; errors name the file and key."""

    def __init__(self, path: Path, raw: dict[str, Any]) -> None:
        self.path, self.raw = path, raw

    def _fail(self, key: str, expected: str) -> ConfigError:
        return ConfigError(f"{self.path}: {key}: expected {expected}, got {self.raw[key]!r}")

    def text(self, key: str, default: str) -> str:
        value = self.raw.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self._fail(key, "a string")
        return value

    def integer(self, key: str, default: int, minimum: int | None = None) -> int:
        value = self.raw.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or (minimum is not None and value < minimum):
            raise self._fail(key, "an integer" + (f" >= {minimum}" if minimum is not None else ""))
        return value

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        value = self.raw.get(key, default)
        if value not in choices:
            raise self._fail(key, f"one of {', '.join(choices)}")
        return value

    def strings(self, key: str, default: list[str]) -> list[str]:
        value = self.raw.get(key, default)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._fail(key, "a list of strings")
        return list(value)

    def integers(self, key: str, default: list[int]) -> list[int]:
        value = self.raw.get(key, default)
        if not isinstance(value, list) or not value or not all(
                isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**32 for v in value):
            raise self._fail(key, "a non-empty list of integers in [0, 2**32)")
        if len(set(value)) != len(value):
            raise self._fail(key, "distinct integers")
        return list(value)


def parse_objective(path: Path, raw: Any) -> tuple[str, str]:
    if isinstance(raw, str):
        raw = {"metric": raw}
    if isinstance(raw, dict):  # before the metric check: {metrc: val/acc} is a typo, said so
        _check_keys(path, "objective", raw, ("metric", "direction"))
    if not isinstance(raw, dict) or not isinstance(raw.get("metric"), str):
        raise ConfigError(f"{path}: objective: expected {{metric: NAME, direction: maximize|minimize}}, "
                          f"got {raw!r}")
    if "direction" not in raw and _lower_may_be_better(raw["metric"]):
        raise ConfigError(f"{path}: objective: {raw['metric']!r} has no direction, and the default, maximize, would "
                          "pick the arm with the highest; give it: {metric: " + raw["metric"] + ", direction: "
                          "minimize} (or maximize)")
    direction = raw.get("direction", "maximize")
    if direction not in DIRECTIONS:
        raise ConfigError(f"{path}: objective.direction: expected maximize or minimize, got {direction!r}")
    return raw["metric"], direction


_LOWER_MAY_BE_BETTER = ("loss", "drawdown", "len", "norm", "entropy", "kl", "time", "error", "nll", "perplexity",
                        "clip", "frac", "_s")


def _lower_may_be_better(metric: str) -> bool:
    """Whether ``metric`` may be one a sweep minimizes (a loss, a length, a drawdown, a time, a clip fraction),
    so that the default direction, maximize, must not be assumed: ``train/loss`` was maximized. An accuracy,
    reward or gain keeps the default (a misspelt name is refused later, with a did-you-mean)."""
    last = metric.rsplit("/", 1)[-1]
    return any(word in last for word in _LOWER_MAY_BE_BETTER)


def parse_wandb(path: Path, raw: Any) -> tuple[str | None, str | None]:
    if raw is None:
        return None, None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: wandb: expected {{project, group}}, got {raw!r}")
    _check_keys(path, "wandb", raw, ("project", "group"))
    for key in ("project", "group"):
        if raw.get(key) is not None and (not isinstance(raw[key], str) or not raw[key].strip()):
            raise ConfigError(f"{path}: wandb.{key}: expected a name (a non-empty string), got {raw[key]!r}")
    return raw.get("project"), raw.get("group")


def _check_keys(path: Path, section: str, raw: dict[Any, Any], allowed: tuple[str, ...]) -> None:
    """Refuse the first key of ``raw`` (the spec's ``section:``) not in ``allowed``, with a did-you-mean."""
    extra = sorted(str(k) for k in raw if k not in allowed)
    if extra:
        raise ConfigError(f"{path}: {section}: unknown key {extra[0]!r}{did_you_mean(extra[0], allowed)}; "
                          f"allowed: {', '.join(allowed)}")


def check_sampler(spec: SweepSpec) -> None:
    if spec.sampler == "grid":
        for axis in spec.axes:
            if axis.is_range:
                raise spec.err(f"axes.{axis.key}", "a low/high range needs sampler tpe or random, not grid")
        if spec.n_trials is not None:
            raise spec.err("n_trials", "the grid sampler runs every point x seed; drop n_trials")
        return
    if not isinstance(spec.n_trials, int) or isinstance(spec.n_trials, bool) or spec.n_trials < 1:
        raise spec.err("n_trials", f"sampler {spec.sampler} needs n_trials >= 1, got {spec.n_trials!r}")
    continuous = [a.key for a in spec.axes if a.is_continuous]
    if spec.baseline is not None and continuous:
        raise spec.err("baseline", f"no arm can be named in advance: sampler {spec.sampler} draws {continuous[0]} "
                                   "from a continuous range, so every arm's value is new; drop `baseline:` (the table "
                                   "then compares against the arm whose label sorts first) or give the range a step")


def check_experiment(spec_path: Path, written: str, resolved: Path | None) -> None:
    """Refuse an ``experiment:`` file that does not exist, naming it as written in the spec (and where that
    resolved from the spec's directory) with the closest file of that directory: the check after loading
    named only the resolved path (``experiments/quickstart/sftt.yaml`` for ``../experiments/...``).

    Only where trials are composed (``load_spec(check_base=True)``): comparing a finished sweep needs no
    base experiment.
    """
    if resolved is None or resolved.is_file():
        return
    where = f" (relative to the spec's directory: {resolved})" if str(resolved) != written else ""
    folder, name = resolved.parent, resolved.name
    head = written[:len(written) - len(Path(written).name)]  # the directory part as written: "../experiments/x/"
    if resolved.is_dir():
        hint = "; that is a directory: name a YAML file in it"
    elif (here := Path(written)).is_file() and not here.is_absolute() and not _is_sweep_spec(here):  # from the cwd
        hint = (f"; it is there from the working directory: a spec's paths are read from its own directory, so "
                f"write experiment: {os.path.relpath(here.resolve(), spec_path.resolve().parent)}")
    elif folder.is_dir():
        files = [p.name for p in folder.iterdir() if p.suffix in (".yaml", ".yml") and not _is_sweep_spec(p)]
        hint = did_you_mean(name, files, prefix=head) or (f"; YAML files there: {', '.join(sorted(files)[:8])}"
                                                         if files else f"; no experiment YAML in {folder}")
    else:
        hint = f"; no directory {folder}"
    raise ConfigError(f"{spec_path}: experiment: {written!r} not found{where}{hint}")


def _is_sweep_spec(path: Path) -> bool:
    """Whether ``path`` reads as a sweep spec (``layers.sweep_spec_like``): not an experiment to suggest."""
    import yaml

    from klear_lab.config.layers import sweep_spec_like

    try:
        body = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(body, dict) and sweep_spec_like(body)


def check_runner(spec: SweepSpec) -> None:
    """A custom ``runner:`` must name a function that exists: otherwise every trial would start, fail on
    it and be counted as a failure a rerun retries. A file runner is read, not run (``ast``), here."""
    from klear_lab.sweep.spec import DEFAULT_RUNNER

    if spec.runner == DEFAULT_RUNNER:
        return
    module, _, attr = spec.runner.rpartition(":")
    if module.endswith(".py"):
        path = Path(module)
        try:
            tree = ast.parse(path.read_text(), filename=str(path))
        except (OSError, SyntaxError, ValueError) as exc:
            raise spec.err("runner", f"cannot read {path}: {exc}") from None
        names = _module_level_names(tree)
        if "*" not in names and attr not in names:  # a star import may bring it: left to the trial
            raise spec.err("runner", f"{path} defines no {attr!r} at its top level")
        return
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise spec.err("runner", f"no module {module!r} on this Python's path")
    try:
        loaded = importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - its own imports or code: every trial would fail on it
        raise spec.err("runner", f"importing {module!r} failed: {type(exc).__name__}: {exc}") from None
    if not hasattr(loaded, attr):
        raise spec.err("runner", f"module {module!r} has no {attr!r}")


def _module_level_names(tree: ast.Module) -> set[str]:
    """Every name the file binds, at any depth ("*" for a star import): lenient, so that a runner defined
    inside ``try``/``if`` blocks passes; only a name bound nowhere is refused."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names
