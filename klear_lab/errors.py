"""User-facing errors. Each names the file, key, row or value at fault; the CLI maps them to exit 2."""

from __future__ import annotations

import functools
import importlib
import inspect
import math
import os
import socket
from typing import Any


class KlearError(Exception):
    """Base class for errors caused by user input (config, data, CLI). Exit code 2."""

    exit_code = 2


class ConfigError(KlearError):
    """A config problem: bad YAML, unknown key, wrong type, unknown component, bad value."""


def keyed_error(key: str, message: str) -> ConfigError:
    """A ConfigError about config key ``key``: compose adds the file or command line that set it."""
    error = ConfigError(message)
    error.key = key  # type: ignore[attr-defined]
    return error


def require(ok: bool, key: str, message: str) -> None:
    """Raise ``keyed_error`` with the message "``key`` ``message``" unless ``ok``."""
    if not ok:
        raise keyed_error(key, f"{key} {message}")


class DataError(KlearError):
    """A data problem: missing file, malformed row, missing field."""


class DivergedError(KlearError):
    """Training produced a non-finite gradient norm (a learning rate too high, say): the run stops
    before the optimizer step that would make every weight NaN, and is recorded as failed. Exit code 1."""

    exit_code = 1


class ComponentError(ConfigError, TypeError):
    """A registered component (usually a plugin's) broke its axis' contract while a run used it: a reward that
    did not return one ``RewardOutput`` per completion, a clip that did not return ``ClipOutput``. A config
    error (exit code 2; a sweep does not retry it): the same config fails the same way again. Also a
    ``TypeError``, what these checks raised before."""


def component_error(axis: str, component: Any, problem: str) -> ComponentError:
    """A :class:`ComponentError` naming ``component``: its registered name and where its class (or function)
    is defined."""
    cls = type(component)
    name = getattr(component, "registered_name", cls.__name__)
    where = defined_at(cls)
    return ComponentError(f"{axis} {name!r}{f' ({where})' if where else ''} {problem}")


def defined_at(cls: type) -> str:
    """``file:line`` of a component class (a registered function's own line), or "" without source (a REPL)."""
    defined = getattr(cls, "component_function", cls)
    try:
        return f"{inspect.getsourcefile(defined)}:{inspect.getsourcelines(defined)[1]}"
    except (OSError, TypeError):
        return ""


def probe_failure(axis: str, component: Any, probe: str, exc: BaseException) -> ComponentError:
    """A :class:`ComponentError` for a component that raised ``exc`` on its probe input (``probe``: what it
    was given): a plugin's bug, reported with the exception and the line that raised it."""
    import traceback

    frame = traceback.extract_tb(exc.__traceback__)[-1]
    return component_error(axis, component, f"failed on {probe}: {type(exc).__name__}: {exc} "
                                            f"({frame.filename}:{frame.lineno})")


def did_you_mean(word: str, choices: Any, *, prefix: str = "") -> str:
    """`` (did you mean 'x'?)`` for the choice closest to a mistyped ``word``, or "" when none is close.

    ``prefix`` goes before the suggestion, not into the comparison: a section's path, so that ``optim.lrr``
    gets ``'optim.lr'`` from the section's keys ``lr, ...`` with ``prefix="optim."``.
    """
    import difflib

    hint = difflib.get_close_matches(str(word), sorted(map(str, choices)), n=1)
    return f" (did you mean {prefix + hint[0]!r}?)" if hint else ""


def check_finite(value: float, name: str, step: int) -> None:
    """Raise :class:`DivergedError` if ``value`` (the metric ``name`` at optimizer step ``step``) is NaN or inf."""
    if not math.isfinite(value):
        raise DivergedError(f"training diverged: {name} is {value} at step {step}, so the run stops before "
                            "the update (weights as after the step before; lower optim.lr or check the data)")


REPEATING_ERRORS = (ConfigError, DataError, DivergedError)
"""Errors the same config and data raise alike again: a sweep does not retry a trial that failed on one, and
``klear-lab runs`` says to fix the config or data before a rerun."""


INTERRUPTED = "interrupted (Ctrl-C)"  # the error a run, or a sweep's trial, stopped by Ctrl-C records


def interrupted(exc: BaseException) -> bool:
    """Ctrl-C: a ``KeyboardInterrupt``, or the ``sys.exit(1)`` Lightning turns one inside ``fit`` into."""
    return isinstance(exc, KeyboardInterrupt) or (isinstance(exc, SystemExit)
                                                  and isinstance(exc.__context__, KeyboardInterrupt))


class TransientError(KlearError):
    """A download failed on the network (refused or reset connection, timeout, a 5xx or 429 answer):
    retrying may succeed, so a sweep reruns the trial instead of counting it as a config error.
    Exit code 75 (``EX_TEMPFAIL``)."""

    exit_code = 75


OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")  # datasets reads all three


def hub_offline() -> str | None:
    """The first of ``OFFLINE_VARS`` that turns the hub off (read as huggingface_hub does), or None."""
    return next((name for name in OFFLINE_VARS
                 if os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE")), None)


@functools.cache
def _transport_errors() -> tuple[type[BaseException], ...]:
    """Network failures as the HTTP clients under huggingface_hub and datasets raise them (those installed)."""
    found: list[type[BaseException]] = [ConnectionRefusedError, ConnectionResetError, ConnectionAbortedError,
                                        TimeoutError, socket.gaierror]
    names = {"httpx2": ("TimeoutException", "NetworkError", "ProxyError", "RemoteProtocolError"),
             "httpx": ("TimeoutException", "NetworkError", "ProxyError", "RemoteProtocolError"),
             "requests": ("ConnectionError", "Timeout"),
             "urllib3.exceptions": ("TimeoutError", "ProtocolError", "NewConnectionError", "ProxyError")}
    for module_name, classes in names.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        found += [getattr(module, name) for name in classes if hasattr(module, name)]
    return tuple(found)


def network_cause(exc: BaseException) -> BaseException | None:
    """The network failure in ``exc``'s chain of causes, or None: a missing repo, file or permission, a
    file lock's timeout, or the hub turned off (then huggingface_hub and datasets raise ``ConnectionError``
    subclasses or messages naming ``OfflineModeIsEnabled``)."""
    chain: list[BaseException] = []
    node: BaseException | None = exc
    while node is not None and all(node is not seen for seen in chain):
        chain.append(node)
        node = node.__cause__ or node.__context__
    if hub_offline() or any("OfflineModeIsEnabled" in f"{type(n).__name__} {n}" for n in chain):
        return None
    transport = _transport_errors()
    for node in chain:
        status = getattr(getattr(node, "response", None), "status_code", None)
        if isinstance(status, int) and (status >= 500 or status == 429):
            return node
        if isinstance(node, transport) and not type(node).__module__.startswith("filelock"):
            return node
    return None


def load_error(what: str, exc: BaseException, cls: type[KlearError]) -> KlearError:
    """``cls`` naming ``what`` for a load that cannot work as configured; a ``TransientError`` where the
    network is to blame (the hub was down or slow), which a rerun may get past."""
    cause = network_cause(exc)
    if cause is not None:
        first_line = str(cause).partition("\n")[0][:300]
        return TransientError(f"{what}: cannot download ({type(cause).__name__}: {first_line}); a network "
                              "problem, and the files are not in the local cache: retry when the hub answers")
    return cls(f"{what}: {exc}")
