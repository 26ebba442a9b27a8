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
# every run calls these; check_fits (optional: without it, no limit, as RolloutRuntime's default) where it has one
RUNTIME_METHODS = ("generate", "sync_weights", "close")


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
    running. ``close`` is required too: :class:`RolloutRuntime` gives it a default, but a runtime that does not
    subclass it may lack it, and every run calls it. ``check_fits`` may be missing (:func:`check_fits`: no limit,
    as the default says; an SFT or eval run that never asked it was refused after training), not uncallable.

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
    for name in (*RUNTIME_METHODS, "check_fits"):
        method = getattr(runtime, name, None)
        if not callable(method) and (name != "check_fits" or method is not None):
            what = f"no {name} method" if method is None else f"a {name} that is not callable ({method!r})"
            return (f"has a start(model, tokenizer) that returned a {type(runtime).__name__} with {what} "
                    "(subclass RolloutRuntime for the default close)")
    return None


def _engine_error(engine: object, where: str, problem: str) -> ComponentError:
    """A ``ComponentError`` prefixed with the config key, naming the engine, its file and the contract."""
    return ComponentError(f"{where}: {component_error('rollout', engine, problem)}; a rollout engine has "
                          f"{ENGINE_CONTRACT}")


def check_fits(runtime: object, prompts: list[str], max_new_tokens: int, where: str) -> None:
    """``runtime.check_fits(...)`` where the runtime has one; one without it takes any prompt (the default)."""
    method = getattr(runtime, "check_fits", None)
    if method is not None:
        method(prompts, max_new_tokens, where)
