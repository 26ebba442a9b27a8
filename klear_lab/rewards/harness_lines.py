"""Reading a harness run's result lines back: in the order the harness writes them (a line out of order is
one the candidate forged, :data:`~klear_lab.rewards.harness.FOUL`), each timed by the host's clock."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from klear_lab.rewards.sandbox_io import LINE_HEAD

TEST_GRACE_S = 1.0
"""Seconds past the per-test limit (and 10 % of it, for a loaded host's pipe and scheduling delays) that a
test may take by the host's clock (the time between its result line and the one before) before it fails
as over the limit, whatever its line says: the limit inside the sandbox is an alarm, which the program
can ignore (a review passed tests 5 s over a 2 s limit)."""


UNREADABLE = "a result line the harness did not write (not JSON it reads back, or one of its keys twice)"

HEAD = re.compile(r'\{"(?:i": (\d+)[,}]|defined": |load_error": )')
"""The start of a harness line (``json.dumps`` of a dict whose first key is ``i``, ``defined`` or ``load_error``)."""

_CANDIDATE_LINE = re.compile(r'^\{"[^\n]*\n', re.M)


class ResultOrder:
    """The harness' lines in the order it writes them: the first ``defined`` (or ``load_error``) line, then
    test 0's result, test 1's... up to the run's last test (``count``); a forged, repeated or skipped one,
    or one past the last test (a test of another run), is out of order."""

    def __init__(self, count: int) -> None:
        self.expected = -1  # -1: the solution is not defined yet; then the next test's index
        self.count = count

    def next(self, head: str) -> int | None:
        """The step a line (its head) takes (-1: defined, i: test i's result), or None if out of order."""
        match = HEAD.match(head)
        step = None if match is None else -1 if match.group(1) is None else int(match.group(1))
        if step is None or step != self.expected or step >= self.count:
            return None
        self.expected += 1
        return step


def next_line(count: int) -> Callable[[bytes], bool | None]:
    """Whether a harness line (its head) of a run of ``count`` tests moves the run on: True for the next
    line in :class:`ResultOrder`, None (end the run: :data:`~klear_lab.rewards.harness.FOUL`) for any other."""
    order = ResultOrder(count)
    return lambda head: True if order.next(head.decode("utf-8", "replace")) is not None else None


def over_time(stdout: str, line_s: Sequence[float], test_s: float | None, count: int,
              ready_s: float | None = None, whole: bool = False) -> list[dict[str, Any]]:
    """The result lines of one run of ``count`` tests, in :class:`ResultOrder` up to the first line out of
    order (the run ended there), each timed by the host's clock against ``test_s`` * 1.1 + :data:`TEST_GRACE_S`.

    The solution's definition (its module-level code) is timed from ``ready_s`` (the sandbox up with the
    whole program) to the ``defined`` line: over the limit, it is a ``load_error``, as the program's own
    alarm can be switched off. A test is timed from the line before it; with ``whole`` (a sandbox per
    test) from ``ready_s``, definition included, as a process of its own is timed. ``line_s``: when each
    in-order line came, one for one. Only whole lines that start like a JSON object are looked at: a
    flood of blank lines costs nothing."""
    records, order = [], ResultOrder(count)
    before = ready_s
    for k, match in enumerate(_CANDIDATE_LINE.finditer(stdout)):
        line = match.group()[:-1]
        step = order.next(line[:LINE_HEAD])
        if step is None:
            break
        rec, at = own_keys(line, step), line_s[k] if k < len(line_s) else None
        late = bool(test_s) and None not in (at, before) and at - before > test_s * 1.1 + TEST_GRACE_S
        if late and step >= 0:
            rec = {"i": step, "timeout": True}
        elif late and not whole and "defined" in rec:
            rec = {"load_error": f"defining the solution took over its {test_s:g} s limit"}
        if step >= 0 or not whole:
            before = at
        records.append(rec)
    return records


def own_keys(line: str, step: int) -> dict[str, Any]:
    """``line`` (in order, at ``step``) as the harness writes it: a test's result indexed by its place in the
    order (not by an ``"i"`` the line repeats further on: a review's ``{"i": 0, "i": -2}`` passed the order
    check as test 0, then moved the host back a test on every run, for ever); a ``defined`` or ``load_error``
    line as only that, by its head (a review's ``{"defined": true, "i": 0, "out": X}``, written after doing
    a test's work untimed while defining, passed test 0)."""
    rec = parse(line)
    if step >= 0:
        return {**rec, "i": step} if rec else {"i": step, "crash": UNREADABLE}
    if line.startswith('{"load_error": '):
        return {"load_error": str(rec.get("load_error", "an unreadable load_error line"))}
    return {"defined": True}


def shifted(rec: dict[str, Any], start: int) -> dict[str, Any]:
    """A result line of a run that began at test ``start``, indexed over all tests."""
    i = rec.get("i")
    return {**rec, "i": i + start} if isinstance(i, int) and not isinstance(i, bool) else rec


def parse(line: str) -> dict[str, Any]:
    """One harness line; anything else the program wrote there (say, nested past the parser's depth, or with a
    key twice) is ``{}``."""
    repeated: list[bool] = []  # per object, innermost first: the line's own object comes last

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        rec = dict(pairs)
        repeated.append(len(rec) < len(pairs))
        return rec

    try:
        rec = json.loads(line, object_pairs_hook=unique)
    except (ValueError, RecursionError):
        return {}
    # the harness writes its own keys once (json.loads keeps a repeated key's last value); a returned dict
    # may repeat one in its JSON ({1: x, "1": x}), which only fails its own comparison
    return rec if isinstance(rec, dict) and not repeated[-1] else {}
