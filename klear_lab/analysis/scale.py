"""Where a reproduction's numbers come from: a tiny model built from config on an embedded world (CPU-sized, the
default), a real checkpoint, or a custom ``runner:`` whose scale is its own. A report puts ours beside the paper's
numbers, so it says which: an embedded sweep's scores do not compare with the paper's, only the direction of each
difference does."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from klear_lab.errors import KlearError


@dataclass(frozen=True)
class Scale:
    short: str  # the summary's "ours on" cell: ``tiny model, embedded arith`` or the checkpoint
    line: str  # the report's sentence
    caution: bool = False  # scores that do not compare with the paper's (a tiny model, a custom runner): in yellow


def scale_of(spec: Any) -> Scale:
    """The scale of the sweep ``spec``'s runs, from its composed base experiment (and its ``model.init_from``
    chain: an RL run starts from an SFT run's model). A sweep with a custom ``runner:`` trains what that
    runner trains: the experiment is only what it is given, so its model and data say nothing here."""
    from klear_lab.config.compose import compose
    from klear_lab.sweep.spec import DEFAULT_RUNNER

    if spec.runner != DEFAULT_RUNNER:
        return custom_runner_scale(spec.runner)
    try:
        cfg = spec.compose()
        model, seen = cfg["model"], set()
        while not model.get("name_or_path") and model.get("init_from") and model["init_from"] not in seen:
            seen.add(model["init_from"])
            model = compose(model["init_from"])["model"]
    except (KlearError, OSError) as exc:
        return Scale("unknown", f"ours: scale unknown (the sweep's experiment does not compose here: {exc})",
                     caution=True)
    sources = [s for s in cfg["data"]["sources"] if isinstance(s, dict)]
    names = list(dict.fromkeys(str(s.get("path") or s.get("name")) for s in sources))
    data = ", ".join(names[:3]) + (f", ... ({len(names)} sources)" if len(names) > 3 else "")
    if model.get("name_or_path"):
        where = str(model["name_or_path"])
        return Scale(model_label(where), f"ours: from {where}, trained on {data}")
    world = not any(s.get("path") for s in sources)
    return Scale("tiny model, embedded world" if world else "tiny model",
                 f"ours: a tiny model built from config, trained on {'the embedded world: ' if world else ''}{data}; "
                 "CPU-sized: its scores do not compare with the paper's, only the direction of each Δ does",
                 caution=True)


def custom_runner_scale(runner: str) -> Scale:
    """A custom ``runner:`` (``file.py:function`` or ``module:function``): named by its file's name in the
    summary's cell, in full in the report's sentence."""
    module, _, function = runner.rpartition(":")
    short = f"{Path(module).name}:{function}" if module.endswith(".py") else runner
    return Scale(f"custom runner {short}",
                 f"ours: from a custom runner: {runner}; its scale is its own (the model and data it trains "
                 "are not read from the sweep's experiment): compare the direction of each Δ, not the scores",
                 caution=True)


def model_label(name_or_path: str) -> str:
    """``model.name_or_path`` as the summary's "ours on" cell shows it. A hub id (``Kwai-Klear/Klear-Reasoner-8B-SFT``)
    or a relative path stays as written. An absolute path (a finished run's directory or its ``model/``, a
    downloaded checkpoint) is shown relative to the working directory where it lies below it
    (``runs/sft-s0``), else by its last part, with the run directory's name for a run's ``model/`` folder
    (``sft-s0/model``): the prefix (``/home/me/scratch/...``) says nothing of the model and widened the column.
    The report's sentence keeps the path as the config gives it."""
    path = Path(name_or_path).expanduser()
    if not path.is_absolute():
        return name_or_path
    if path.is_relative_to(Path.cwd()) and path != Path.cwd():
        return str(path.relative_to(Path.cwd()))
    if path.name == "model" and path.parent.name:
        return f"{path.parent.name}/model"
    return path.name or str(path)
