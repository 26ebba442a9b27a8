"""Settings a run's kind never reads: ``rl.*`` typed for an SFT experiment, ``sft.*`` for an RL one.

Nothing reads them, yet they are saved and hashed: ``train sft.yaml rl.clip=my_clip`` trained the plain SFT
run under a new config hash, and a sweep axis on ``rl.*`` over an SFT experiment ran identical arms as
different ones. Refused when a command line, a sweep (its spec's overrides, a trial's axis values) or a
notebook's mapping sets one to other than its default; a file's are not, since a saved ``config.yaml`` writes
out every section and must compose again. A ``run.kind`` typed over a file that sets the other kind's section
(``train sft.yaml run.kind=rl``) is warned of: the file's settings of its own kind are then read by nothing.
"""

from __future__ import annotations

import warnings
from typing import Any

from klear_lab.errors import ConfigError

OTHER_SECTION = {"sft": "rl", "rl": "sft"}
ARTICLE = {"sft": "an SFT", "rl": "an RL"}
READ_ACROSS = "rl.rollout"
"""Read by every kind: an evaluation with ``eval.engine: rollout`` builds its engine from ``rl.rollout``."""


def refuse_unread(config: dict[str, Any], provenance: dict[str, str], typed: set[str],
                  default: dict[str, Any]) -> None:
    """Raise ConfigError naming the first key of the other kind's section that a layer labelled in ``typed`` set
    (``provenance``: key -> the label of the layer that set it) to other than the schema's ``default`` config."""
    kind = config["run"]["kind"]
    other = OTHER_SECTION.get(kind)
    if other is None:
        return
    keys = _set_keys(config, provenance, default, other, lambda origin: origin in typed)
    if provenance.get("run.kind") in typed and (files := _set_keys(config, provenance, default, other,
                                                                    lambda origin: origin not in typed)):
        shown = ", ".join(files[:3]) + (", ..." if len(files) > 3 else "")
        warnings.warn(f"{provenance['run.kind']}: run.kind={kind} makes {provenance[files[0]]} {ARTICLE[kind]} "
                      f"run, which reads none of its {other}.* settings ({shown}): did you mean to start from "
                      f"{ARTICLE[kind]} experiment?", UserWarning, stacklevel=2)
    if not keys:
        return
    from klear_lab.tracking import IDENTITY_EXCLUDE

    more = f" (and {', '.join(keys[1:4])}{', ...' if len(keys) > 4 else ''})" if len(keys) > 1 else ""
    hashed = any(tuple(key.split(".")[:2]) not in IDENTITY_EXCLUDE for key in keys)  # rl.logp_chunk_tokens is not
    raise ConfigError(f"{provenance[keys[0]]}: {keys[0]}{more}: {ARTICLE[kind]} run (run.kind: {kind}) reads no "
                      f"{other}.* setting: it would change nothing{' but the config hash' if hashed else ''}; set it "
                      f"on {ARTICLE[other]} experiment")


def _set_keys(config: dict[str, Any], provenance: dict[str, str], default: dict[str, Any], section: str,
              chosen: Any) -> list[str]:
    """The keys of ``section`` that a layer ``chosen(label)`` picks set to other than the schema's default."""
    return sorted(key for key, origin in provenance.items()
                  if chosen(origin) and key.split(".")[0] == section
                  and not (key == READ_ACROSS or key.startswith(f"{READ_ACROSS}."))
                  and _at(config, key) != _at(default, key))


def _at(node: Any, key: str) -> Any:
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return KeyError  # absent: differs from any value
        node = node[part]
    return node
