"""User-facing errors. Each names the file, key, row or value at fault; the CLI maps them to exit 2."""

from __future__ import annotations


class KlearError(Exception):
    """Base class for errors caused by user input (config, data, CLI). Exit code 2."""

    exit_code = 2


class ConfigError(KlearError):
    """A config problem: bad YAML, unknown key, wrong type, unknown component, bad value."""


class DataError(KlearError):
    """A data problem: missing file, malformed row, missing field."""


def interrupted(exc: BaseException) -> bool:
    """Ctrl-C: a ``KeyboardInterrupt``, or the ``sys.exit(1)`` Lightning turns one inside ``fit`` into."""
    return isinstance(exc, KeyboardInterrupt) or (isinstance(exc, SystemExit)
                                                  and isinstance(exc.__context__, KeyboardInterrupt))
