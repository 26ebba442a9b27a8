"""Run a whole program against ``{"stdin": str, "stdout": str}`` tests (verl, LiveCodeBench) in the sandbox.

One harness process (:mod:`klear_lab.rewards.harness`) runs the program once per test in a fresh
``__main__`` namespace, with what a judge gives a process of its own: fd 0 a pipe carrying the test's
stdin, fd 1 a nameless file of its own in /tmp (``open(0)``, ``os.read(0, ...)``, ``sys.stdin.buffer``, ``fileno()``
based fast-I/O templates and ``print(file=sys.__stdout__)`` all work), and at the end what the
interpreter's exit does: non-daemon threads joined (the ``threading.Thread(target=main)`` idiom for
deep recursion), ``atexit`` functions run, ``sys.stdout`` flushed (even one the program replaced).
``exit()``, ``sys.exit(0)`` and ``os._exit(0)`` end a test normally; another exit code fails it. As in
a process, ``os._exit``, from any thread, ends the test at once: no ``finally``, ``atexit`` function or
flush runs, so unflushed output is lost (the next tests run in a fresh sandbox). A test
that leaves a thread running ends the harness after its result (the next tests run in a fresh
sandbox). Unlike under a process per test (``tests_per_run=1``, the code reward's
``process_per_test``), state a program leaves in other modules (``sys``, ``builtins``) carries over to
the next test of the same sandbox; a program would have to go looking for that on purpose.

The harness sends back a SHA-256 of the normalized output (:data:`NORMALIZE`), never the output: a
line stays short whatever the program printed, and a forged line would need the answer's digest.
The host compares it with the expected output's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from klear_lab.rewards.harness import PRELUDE, TestRun, run_harness, verdicts
from klear_lab.rewards.sandbox import SandboxLimits

__all__ = ["TestRun", "normalized_output", "run_stdio_tests", "stdout_matches"]

NORMALIZE = '''def _normalized(data):
    """Output as judges compare it: leading and trailing whitespace of the whole, and trailing
    whitespace of each line (so ``\\r\\n`` line ends too), ignored (the official code compares
    ``got.strip() == expected.strip()``)."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return "\\n".join(line.rstrip() for line in text.strip().split("\\n")).encode("utf-8", "surrogatepass")
'''
"""The one normalization, run by the harness on the program's output and by the host on the expected one."""

_scope: dict[str, Any] = {}
exec(NORMALIZE, _scope)  # noqa: S102 - our own constant: the host's copy of the harness' function
normalized_output = _scope["_normalized"]

_STDIO_HARNESS = PRELUDE + NORMALIZE + """import atexit, gc, hashlib, operator, posix, threading, time
try:
    _code = compile(_P["code"], "solution.py", "exec")
except BaseException as e:
    _emit({"load_error": type(e).__name__ + ": " + str(e)[:200]}); os._exit(0)
_emit({"defined": True})
_real_exit, _empty, _lock, _live = os._exit, os.open(os.devnull, os.O_RDONLY), threading.RLock(), [False]
def _exit_test(status):  # os._exit as a process of its own has it, from any thread: the test ends with
    # what fd 1 holds (no finally, atexit or flush runs), reported here; the next tests run in a fresh sandbox
    status = operator.index(status)  # TypeError, OverflowError: as the real one raises them
    if not -2**31 <= status < 2**31:
        raise OverflowError("signed integer is greater than maximum")
    _disarm()
    while True:
        try:
            _lock.acquire()
            break
        except _Timeout:  # an alarm already on its way (main thread): the lock is not held
            pass
    if not _live[0]:  # the test is over
        _lock.release()
        if threading.current_thread() is threading.main_thread():
            return  # its teardown (a __del__): nothing more to end
        while True:  # as if the process had ended (a thread left running ends the sandbox after the test)
            time.sleep(3600)
    _report(dict(i=_i, **_exit_error(status)))
    _real_exit(0)  # the lock stays held: the main thread reports nothing more for this test
def _leave():  # the test is over: no os._exit reports for it from now (an alarm arriving here is retried)
    while True:
        try:
            _disarm()
            with _lock:
                _live[0] = False
            return
        except _Timeout:
            pass
def _feed(w, data):
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(w, view[:65536]):]
    except OSError:
        pass
    finally:
        os.close(w)
def _exit_error(code):
    if isinstance(code, int) and not isinstance(code, bool):
        code &= 0xFF  # as the kernel keeps it
    return {} if code in (None, 0) else {"err": "exit " + str(code)[:50]}
def _report(rec):
    try:
        _got = _output(_o)
        rec.update(digest=hashlib.sha256(_normalized(_got)).hexdigest(), bytes=len(_got))
    except BaseException as e:
        rec["err"] = "output: " + type(e).__name__
    _emit(rec)
def _new_threads(before):
    return [t for t in threading.enumerate() if t not in before and t.is_alive()]
def _output(fd):  # pread: fd 1 shares the offset, and a thread may still be writing there
    parts, at = [], 0
    while chunk := os.pread(fd, 1 << 20, at):
        parts.append(chunk)
        at += len(chunk)
    return b"".join(parts)
for _i, _data in enumerate(_P["stdins"]):
    _r, _w = os.pipe()
    os.dup2(_r, 0); os.close(_r)
    _feeder = threading.Thread(target=_feed, args=(_w, _data.encode("utf-8", "surrogatepass")), daemon=True)
    _feeder.start()
    _o = os.open("/tmp", os.O_TMPFILE | os.O_RDWR, 0o600)  # nameless (memfds are refused)
    os.dup2(_o, 1)
    sys.stdin = sys.__stdin__ = io.open(0, "r", encoding="utf-8", errors="replace", closefd=False)
    sys.stdout = sys.__stdout__ = _mine = io.open(1, "w", encoding="utf-8", errors="replace", closefd=False)
    _before, _rec, _g = set(threading.enumerate()), {"i": _i}, {}
    try:
        _arm()
        try:
            os._exit = posix._exit = _exit_test  # for good: a thread may look it up after the test
            _live[0] = True
            try:
                try:
                    exec(_code, _g := {"__name__": "__main__"})
                finally:
                    try:  # as the interpreter does once __main__ ends, before threads and atexit
                        sys.stdout.flush()
                    except Exception:
                        pass
            except SystemExit as e:
                _rec.update(_exit_error(e.code))
            for _t in _new_threads(_before):
                if not _t.daemon:
                    _t.join()
            atexit._run_exitfuncs()  # the "write it all at exit" fast-I/O templates
        finally:
            _leave()
            atexit._clear()
    except _Timeout:
        _rec["timeout"] = True
    except BaseException as e:
        _rec["err"] = type(e).__name__ + ": " + str(e)[:200]
    for _stream in (sys.stdout, *(v for v in _g.values() if isinstance(v, io.IOBase)), _mine):
        try:  # as the interpreter's exit would: a collected cycle drops a TextIOWrapper's buffer
            _stream.flush()
        except BaseException:
            pass
    sys.stdin = sys.__stdin__ = sys.stdout = sys.__stdout__ = _stream = None
    _g.clear()
    gc.collect()  # files the program opened on fd 0 or 1 close now, not in a later test
    os.dup2(_null, 1); os.dup2(_empty, 0)
    _feeder.join(1)
    _report(_rec)
    os.close(_o)
    def _stray():  # an OS thread may outlive its join() by a moment: look twice
        return _new_threads(_before) or len(os.listdir("/proc/self/task")) > threading.active_count()
    if _stray() and (time.sleep(0.01) or _stray()):
        _real_exit(0)  # threads still running (timed out, daemons, _thread's) would write into the next test
"""


def stdout_matches(got: Any, expected: str) -> bool:
    """Program output against an expected stdout, normalized as :data:`NORMALIZE` says."""
    return isinstance(got, (str, bytes)) and normalized_output(got) == normalized_output(expected)


def run_stdio_tests(code: str, tests: Sequence[dict[str, Any]], *, timeout_s: float,
                    test_timeout_s: float | None = None, limits: SandboxLimits | None = None,
                    tests_per_run: int | None = None, fixed_total: bool = False) -> TestRun:
    """Run ``code`` as a whole program once per ``{"stdin": str, "stdout": str}`` test, all in one sandbox
    process (more after a stall or a crash: :func:`~klear_lab.rewards.harness.run_harness`); output is
    compared on the host by digest (:func:`stdout_matches`'s rule). Timeouts, ``tests_per_run`` and
    ``fixed_total`` as in :func:`~klear_lab.rewards.function_tests.run_function_tests`. Output past
    ``limits.fsize_mb`` fails its test (the write raises inside the program)."""
    payload = {"code": code, "stdins": [t["stdin"] for t in tests], "test_s": test_timeout_s}
    expected = [hashlib.sha256(normalized_output(t["stdout"])).hexdigest() for t in tests]
    res = run_harness(_STDIO_HARNESS, payload, "stdins", timeout_s, limits, tests_per_run, fixed_total)
    return verdicts(res, timeout_s, test_timeout_s, len(tests),
                    lambda i, rec: "err" not in rec and rec.get("digest") == expected[i])
