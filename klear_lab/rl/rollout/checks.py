"""Checks that a rollout engine entry (``rl.rollout``) and the runtime its ``start`` returns keep the contract of
``klear_lab.rl.rollout.base``, so a plugin engine that does not fails at the run's start with a ``ComponentError``
(exit 2) naming the config key, the engine and its file, not later with an AttributeError (exit 1).

No torch import: ``klear_lab.rl.rollout.base`` re-exports these.
"""

from __future__ import annotations

import inspect

from klear_lab.errors import ComponentError, component_error

ENGINE_CONTRACT = ("start(model, tokenizer) -> RolloutRuntime (its generate, sync_weights, check_fits, close: "
                   "klear_lab/rl/rollout/base.py), and check_available() if it has one")
# every caller calls all four: the runs call check_fits on their prompt pools and close when they end
RUNTIME_METHODS = ("generate", "sync_weights", "check_fits", "close")


def check_rollout_engine(engine: object, where: str) -> None:
    """Refuse an engine entry the run cannot start: no callable ``start`` taking ``(model, tokenizer)``, or a
    ``check_available`` that is not callable. The run calls both before its first rollout, after the data and the
    model were loaded (``--dry-run`` said "ready" and the run then stopped with an AttributeError, exit 1)."""
    start = getattr(engine, "start", None)
    if not callable(start):
        missing = "has no start method" if start is None else f"has a start that is not callable ({start!r})"
        raise _engine_error(engine, where, missing)
    try:
        inspect.signature(start).bind(None, None)
    except TypeError as exc:
        raise _engine_error(engine, where, f"has a start that cannot be called as start(model, tokenizer) "
                            f"({exc})") from None
    except ValueError:  # a callable without a signature (a builtin): called as it is
        pass
    check = getattr(engine, "check_available", None)
    if check is not None and not callable(check):
        raise _engine_error(engine, where, f"has a check_available that is not callable ({check!r})")


def check_rollout_runtime(runtime: object, engine: object, where: str) -> None:
    """Refuse what ``engine.start(model, tokenizer)`` returned when one of :data:`RUNTIME_METHODS` is missing or
    not callable (``None`` among them), closing it first if it has a callable ``close``, so nothing is left
    running. ``check_fits`` and ``close`` are required too: :class:`RolloutRuntime` gives them defaults, but a
    runtime that does not subclass it may lack them, and the runs call both.

    Raises:
        ComponentError: naming ``where`` (the config key), the engine, its file and the contract.
    """
    problem = runtime_problem(runtime)
    if problem is None:
        return
    error = _engine_error(engine, where, problem)
    close = getattr(runtime, "close", None)
    if callable(close):
        try:
            close()
        except Exception as exc:  # the contract error is the one to report; the close's failure is its cause
            raise error from exc
    raise error


def runtime_problem(runtime: object) -> str | None:
    """What the runtime returned by ``start`` lacks, as the end of a sentence about the engine, or None."""
    if runtime is None:
        return "has a start(model, tokenizer) that returned None, not a runtime"
    for name in RUNTIME_METHODS:
        method = getattr(runtime, name, None)
        if not callable(method):
            what = f"no {name} method" if method is None else f"a {name} that is not callable ({method!r})"
            return (f"has a start(model, tokenizer) that returned a {type(runtime).__name__} with {what} "
                    "(subclass RolloutRuntime for the default check_fits and close)")
    return None


def _engine_error(engine: object, where: str, problem: str) -> ComponentError:
    """A ``ComponentError`` prefixed with the config key, naming the engine, its file and the contract."""
    return ComponentError(f"{where}: {component_error('rollout', engine, problem)}; a rollout engine has "
                          f"{ENGINE_CONTRACT}")
