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


class TransientError(KlearError):
    """A download failed on the network (refused or reset connection, timeout, a 5xx or 429 answer):
    retrying may succeed, so a sweep reruns the trial instead of counting it as a config error.
    Exit code 75 (``EX_TEMPFAIL``)."""

    exit_code = 75


_NETWORK_NAMES = ("Connect", "Timeout", "NetworkError", "ReadError", "WriteError", "RemoteProtocolError")


def network_cause(exc: BaseException) -> BaseException | None:
    """The network failure in ``exc``'s chain of causes, or None (a missing repo, file or permission;
    offline mode without the files cached, which huggingface_hub raises as a ``ConnectionError``)."""
    chain: list[BaseException] = []
    node: BaseException | None = exc
    while node is not None and all(node is not seen for seen in chain):
        chain.append(node)
        node = node.__cause__ or node.__context__
    if any(type(node).__name__ == "OfflineModeIsEnabled" for node in chain):
        return None
    for node in chain:
        status = getattr(getattr(node, "response", None), "status_code", None)
        if isinstance(status, int) and (status >= 500 or status == 429):
            return node
        if isinstance(node, (ConnectionError, TimeoutError)) or any(
                part in cls.__name__ for cls in type(node).__mro__ for part in _NETWORK_NAMES):
            return node
    return None


def load_error(what: str, exc: BaseException, cls: type[KlearError]) -> KlearError:
    """``cls`` naming ``what`` for a load that cannot work as configured; a ``TransientError`` where the
    network is to blame (the hub was down or slow), which a rerun may get past."""
    cause = network_cause(exc)
    if cause is not None:
        return TransientError(f"{what}: cannot download ({type(cause).__name__}: {str(cause).splitlines()[0][:300]}); "
                              "a network problem: retry, or set HF_HUB_OFFLINE=1 to use the local cache")
    return cls(f"{what}: {exc}")
