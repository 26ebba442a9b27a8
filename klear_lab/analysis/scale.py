"""Where a reproduction's numbers come from: a tiny model built from config on an embedded world (CPU-sized, the
default) or a real checkpoint. A report puts ours beside the paper's numbers, so it says which: an embedded
sweep's scores do not compare with the paper's, only the direction of each difference does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from klear_lab.errors import KlearError


@dataclass(frozen=True)
class Scale:
    short: str  # the summary's "ours on" cell: ``tiny model, embedded arith`` or the checkpoint
    line: str  # the report's sentence


def scale_of(spec: Any) -> Scale:
    """The scale of the sweep ``spec``'s runs, from its composed base experiment (and its ``model.init_from``
    chain: an RL run starts from an SFT run's model)."""
    from klear_lab.config.compose import compose

    try:
        cfg = spec.compose()
        model, seen = cfg["model"], set()
        while not model.get("name_or_path") and model.get("init_from") and model["init_from"] not in seen:
            seen.add(model["init_from"])
            model = compose(model["init_from"])["model"]
    except (KlearError, OSError) as exc:
        return Scale("unknown", f"ours: scale unknown (the sweep's experiment does not compose here: {exc})")
    sources = [s for s in cfg["data"]["sources"] if isinstance(s, dict)]
    names = list(dict.fromkeys(str(s.get("path") or s.get("name")) for s in sources))
    data = ", ".join(names[:3]) + (f", ... ({len(names)} sources)" if len(names) > 3 else "")
    if model.get("name_or_path"):
        return Scale(str(model["name_or_path"]), f"ours: from {model['name_or_path']}, trained on {data}")
    world = not any(s.get("path") for s in sources)
    return Scale("tiny model, embedded world" if world else "tiny model",
                 f"ours: a tiny model built from config, trained on {'the embedded world: ' if world else ''}{data}; "
                 "CPU-sized: its scores do not compare with the paper's, only the direction of each Δ does")
