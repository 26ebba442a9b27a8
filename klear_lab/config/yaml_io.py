"""Read and write experiment YAML: floats as a researcher writes them (``2e-3``), keys given twice refused,
and every error naming the file (and line)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from klear_lab.errors import ConfigError


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads ``2e-3`` as a float (YAML 1.1 would read it as a string) and refuses a key
    given twice in one mapping (YAML keeps the last, silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`, merged by the base class
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is given twice in one mapping",
                                                        key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


class _Dumper(yaml.SafeDumper):
    """SafeDumper that quotes what :class:`_Loader` would read as a float (the string ``"1e-3"``): a saved
    config with such a string (a tag, a name) composed back to a float and could not be resumed."""


for _cls in (_Loader, _Dumper):
    _cls.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$""", re.X),
        list("-+0123456789."),
    )


def parse_yaml(text: str) -> Any:
    """``text`` read as a config file's YAML is (``1e-3`` a float); raises ``yaml.YAMLError``."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def dump_yaml(data: Any) -> str:
    """YAML text that :func:`load_yaml` reads back to ``data`` (keys in their order)."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False)


def load_yaml(path: Path, least: str = "an experiment names at least its `base:`",
              kind: str = "an experiment YAML file") -> dict[str, Any]:
    """Read one YAML mapping; errors name the file (and line for syntax errors). ``least``: what an empty one
    lacks, said when it is empty; ``kind``: what a directory given for it should have been."""
    if path.is_dir():  # `klear-lab config experiments/quickstart`: "not found" would send them looking for it
        yamls = ", ".join(sorted(p.name for p in path.glob("*.yaml"))[:5])
        raise ConfigError(f"{path}: is a directory; expected {kind}"
                          + (f" (in it: {yamls})" if yamls else ""))
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"
                          ) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}{where}: malformed YAML: {getattr(exc, 'problem', exc)}") from None
    if data is None:
        raise ConfigError(f"{path}: the file is empty ({least})")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data
