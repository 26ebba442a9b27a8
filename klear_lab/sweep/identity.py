"""What a study's trials compute, recorded so that a rerun with another base is refused and the refusal
names what changed: the config hash, and the hashed configs themselves (a few KB in the study)."""

from __future__ import annotations

import json
from typing import Any

from klear_lab.config.flat import changed_keys, cut_pair, flatten
from klear_lab.sweep.spec import SweepSpec

SHOWN = 6  # changed keys named in a refusal; the rest are counted


def base_identity(spec: SweepSpec) -> tuple[str, dict[str, Any]]:
    """The hash of the spec's composed base and, for a ``model.init_from`` start, of that experiment too
    (the base holds its path only: an edited starting point trains the later trials on another model);
    with the configs hashed (:func:`~klear_lab.tracking.hashed_body`), by ``base`` and ``init_from``."""
    from klear_lab.starting_point import parent_config
    from klear_lab.tracking import body_hash, hashed_body

    base = spec.compose()
    bodies = {"base": hashed_body(base)}  # each read once: a plugin's code is read to hash it
    model = base["model"]
    if model.get("init_from") and not model.get("name_or_path"):
        bodies["init_from"] = hashed_body(parent_config(base))
    record = {**bodies, FILES: _plugin_files(base.get("plugins") or [])}
    return "+".join(body_hash(body) for body in bodies.values()), _plain(record)


FILES = "plugin_files"
"""In the configs record: each plugin's code digest -> its path, to name an edited plugin (not hashed)."""


def _plugin_files(plugins: list[str]) -> dict[str, str]:
    from klear_lab.plugins import plugin_digests

    return {plugin_digests([p])[0]: str(p) for p in plugins}


def plugin_files(cfg: dict[str, Any]) -> dict[str, str]:
    """Each of ``cfg``'s plugins' code digest -> its path: what a sweep's trials must all run."""
    return _plugin_files(cfg.get("plugins") or [])


def joined_plugin_files(configs: dict[str, Any] | None, own: dict[str, str]) -> dict[str, str]:
    """What a ``--join`` worker's trials must run: the code the study recorded for each plugin (``configs``: its
    base's configs record, :data:`FILES`) at a path this worker's plugins share (the same checkout), else this
    worker's own (:func:`plugin_files`, ``own``; another machine's paths). A joiner started after an edit
    snapshotted the new code, and ran it beside the other workers' arms (a review)."""
    recorded = (configs or {}).get(FILES) or {}
    theirs = set(recorded.values())
    return {**{digest: path for digest, path in recorded.items() if path in own.values()},
            **{digest: path for digest, path in own.items() if path not in theirs}}


def check_plugins_unchanged(started: dict[str, str], cfg: dict[str, Any]) -> None:
    """Refuse a trial whose plugin code is not what the sweep started with (:func:`plugin_files`): a plugin
    edited while a sweep ran had its later trials run the new code, and the comparison table set arms of other
    code side by side without a word.

    Raises:
        ConfigError: naming the plugin edited, and how to go on.
    """
    from klear_lab.errors import ConfigError

    then = {path: digest for digest, path in started.items()}
    edited = sorted(path for digest, path in plugin_files(cfg).items() if then.get(path, digest) != digest)
    if edited:  # a plugin a trial's own layer lists (a `plugins` axis) has nothing to compare with
        raise ConfigError(f"plugins: edited {', '.join(edited)} since this sweep started: its trials would compare "
                          "different code; put the file back as it was, or stop the sweep and start the edited code "
                          "as a new sweep (rename it: name: or --name)")


def config_changes(old: dict[str, Any], new: dict[str, Any]) -> str:
    """The keys whose values differ between two :func:`base_identity` config records, as ``key: old -> new``
    (the starting point's named so), at most :data:`SHOWN` of them; "" when none can be told apart."""
    changes = []
    files = {**old.get(FILES, {}), **new.get(FILES, {})}  # digest -> path: the spec's now, the study's before
    for part in sorted((old.keys() | new.keys()) - {FILES}):
        if part not in old or part not in new:
            changes.append(f"a model.init_from starting point {'added' if part in new else 'removed'}")
            continue
        prefix = "" if part == "base" else "the model.init_from experiment's "
        was, now = flatten(old[part]), flatten(new[part])
        for key, before, after in changed_keys(was, now):  # compared whole, then cut for showing
            changes.append(prefix + (_plugins_change(was.get(key), now.get(key), files) if key == "plugins"
                                     else "{}: {} -> {}".format(key, *cut_pair(before, after))))
    more = f" and {len(changes) - SHOWN} more" if len(changes) > SHOWN else ""
    return "; ".join(changes[:SHOWN]) + more


def _plugins_change(before: Any, after: Any, files: dict[str, str]) -> str:
    """A plugin list's change, by code digest (paths are not hashed: the same code anywhere is the same),
    naming the files where the records hold their paths (studies started before they did count them)."""
    was, now = set(before if isinstance(before, list) else []), set(after if isinstance(after, list) else [])
    gone, came = sorted(was - now), sorted(now - was)
    if all(d in files for d in gone + came):
        edited = sorted({files[d] for d in gone} & {files[d] for d in came})
        parts = [f"{what} {', '.join(names)}" for what, names in (
            ("edited", edited), ("no longer used", sorted({files[d] for d in gone} - set(edited))),
            ("new", sorted({files[d] for d in came} - set(edited)))) if names]
        return f"plugins: {'; '.join(parts)} (a plugin's code is hashed whole, comments included)"
    return (f"plugins: {len(gone)} plugin file(s) no longer used or edited, {len(came)} new or "
            "edited (a plugin's code is hashed whole, comments included)")


def _plain(value: Any) -> Any:
    """JSON values only, as Optuna's user attributes keep them (and compare them after a round trip)."""
    return json.loads(json.dumps(value, default=str))
