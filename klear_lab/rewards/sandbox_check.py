"""Whether a sandbox can run on this machine, found before a run starts (registers nothing).

A run that would call the code reward without a sandbox failed at its first reward call, after the model
had loaded and the first rollouts were made: ``bwrap`` missing, host root without CAP_SYS_ADMIN, or a
``bwrap`` installed where it cannot make its namespaces. :func:`sandbox_unavailable` says which, for the
code reward's ``unavailable()`` (:mod:`klear_lab.reward_checks`).
"""

from __future__ import annotations

import re

from klear_lab.rewards.isolation import current_isolation
from klear_lab.rewards.sandbox import MISSING_BWRAP, SandboxStartTimeout, find_bwrap, run_python


def sandbox_unavailable() -> str | None:
    """Why no sandbox can run on this machine, as :func:`run_python` would fail at its first call: ``bwrap`` is
    not found (:func:`require_bwrap`'s lookup), this process is host root without CAP_SYS_ADMIN
    (``current_isolation``), or a sandbox does not start (:func:`start_failure`); None when none of these."""
    bwrap = find_bwrap()
    if bwrap is None:
        return MISSING_BWRAP
    try:
        current_isolation()
    except RuntimeError as exc:
        return str(exc)
    except OSError as exc:  # no /proc/self/uid_map (a kernel without user namespaces): the first call fails so too
        return f"cannot tell how to isolate the sandbox on this machine: {exc}"
    return start_failure(bwrap)


NO_NAMESPACES_HINT = (" (as where unprivileged user namespaces are restricted: Ubuntu 23.10 and later: "
                      "sysctl kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor profile for bwrap; "
                      "a container: a seccomp profile that allows them)")
_start_failures: dict[str, str | None] = {}  # bwrap path -> why no sandbox starts with it (None: one did)


def start_failure(bwrap: str) -> str | None:
    """Why a sandbox does not start with ``bwrap`` here, or None: a ``bwrap`` installed but unable to make the
    sandbox's namespaces passed the path lookup, and the run failed at its first reward call, after the model
    had loaded and rollouts were made. One sandbox per process and ``bwrap`` (about 50 ms); a start that only
    took too long is not remembered, nor refused (a loaded host: the run's own calls say if it lasts)."""
    if bwrap not in _start_failures:
        try:
            result = run_python("print('ok')", timeout_s=10.0)
        except SandboxStartTimeout:
            return None
        except (RuntimeError, OSError) as exc:  # OSError: bwrap could not be executed at all
            hint = NO_NAMESPACES_HINT if re.search(r"namespace|permission|not permitted", str(exc), re.I) else ""
            _start_failures[bwrap] = f"bwrap ({bwrap}) is installed but cannot start a sandbox here: {exc}{hint}"
        else:
            if result.timed_out:
                return None
            _start_failures[bwrap] = None if result.returncode == 0 and result.stdout == "ok\n" else (
                f"bwrap ({bwrap}) started a sandbox here, but a program that prints 'ok' exited {result.returncode} "
                f"with {result.stdout[-200:]!r} on stdout: {result.stderr[-300:]}")
    return _start_failures[bwrap]
