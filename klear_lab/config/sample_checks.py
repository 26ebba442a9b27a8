"""``eval.samples_per_source`` (avg@k per held-out source): its values, and that each key names a held-out
source, checked before any data is read wherever the config says what the held-out records are named."""

from __future__ import annotations

from typing import Any

from klear_lab.errors import require

BUILTIN_SOURCES = "klear_lab.data.sources."


def check_samples_per_source(ev: dict[str, Any]) -> None:
    """``eval.samples_per_source``: a mapping of source name -> an integer >= 1 (> 1 needs a temperature)."""
    if ev["samples_per_source"] is None:  # `eval.samples_per_source=null` clears a mapping an earlier layer set
        ev["samples_per_source"] = {}
    for source, k in ev["samples_per_source"].items():
        key = f"eval.samples_per_source.{source}"
        require(isinstance(k, int) and not isinstance(k, bool) and k >= 1, key,
                f"must be an integer >= 1, got {k!r}{_dotted_label_hint(source, k)}")
        require(k == 1 or ev["temperature"] > 0, key,
                f"is {k} with eval.temperature 0: greedy samples are all the same; set eval.temperature")


def _dotted_label_hint(source: Any, k: Any) -> str:
    """``eval.samples_per_source.bench.v2=4`` is read as ``{bench: {v2: 4}}`` (a dot splits keys): a source
    named with a dot (a file ``bench.v2.jsonl``'s default label) is set as a mapping instead."""
    if not (isinstance(k, dict) and len(k) == 1):
        return ""
    rest, value = next(iter(k.items()))
    if isinstance(value, dict):  # more dots: name the whole label only for one
        return ""
    return (f"; a source named with a dot, {source}.{rest}, is set as a mapping: "
            f"eval.samples_per_source={{{source}.{rest}: {value}}}")


def check_labelled_samples(cfg: dict[str, Any]) -> None:
    """Where the names of the held-out records are known from the config (:func:`held_out_names`), each
    ``eval.samples_per_source`` key names one, so ``--validate-only`` and ``--dry-run`` catch a stale or
    mistyped key; otherwise the check waits for the records (``builders.eval_sampling``)."""
    names = held_out_names(cfg["data"]["eval_sources"])
    if not names:
        return
    for name in cfg["eval"]["samples_per_source"]:
        require(name in names, f"eval.samples_per_source.{name}",
                f"names no held-out source (data.eval_sources give: {', '.join(dict.fromkeys(names))}; a file "
                "source's name is its `label`); drop it with eval.samples_per_source=null and set again the "
                "ones you want")


def held_out_names(nodes: list[dict[str, Any]]) -> list[str] | None:
    """The names the records of held-out sources ``nodes`` carry, where the config says: a source's ``label``,
    else a built-in generated source's registered name (``arith``: its records are named so). None where a
    source's records name themselves: an unlabelled file (its rows or file name), a plugin source."""
    from klear_lab.registry import SOURCE

    names = []
    for node in nodes:
        if node.get("label"):
            names.append(node["label"])
        elif node["name"] != "file" and SOURCE.get(node["name"]).__module__.startswith(BUILTIN_SOURCES):
            names.append(node["name"])
        else:
            return None
    return names

