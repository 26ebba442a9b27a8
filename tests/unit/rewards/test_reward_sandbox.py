"""bubblewrap sandbox: no secrets, no host files, no network, no forks, timeouts kill, no fallback."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from klear_lab.rewards import harness, harness_lines, sandbox, sandbox_io
from klear_lab.rewards.function_tests import outputs_match, run_function_tests
from klear_lab.rewards.isolation import choose_isolation, lease_uid
from klear_lab.rewards.sandbox import MARKER, run_python
from klear_lab.rewards.stdio_tests import run_stdio_tests, stdout_matches

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap is Linux-only")


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_parent_environment_is_invisible(monkeypatch):
    monkeypatch.setenv("KLEAR_SECRET", "hunter2")
    res = run_python("import os; print(sorted(os.environ)); print(os.environ.get('KLEAR_SECRET'))")
    names, secret = res.stdout.splitlines()
    assert secret == "None" and "hunter2" not in res.stdout
    assert set(eval(names)) <= {"PATH", "LANG", "PWD"}


def test_bwrap_process_shows_no_parent_environment(monkeypatch):
    """bwrap itself (pid 1 inside) starts with an empty environment, and the program cannot read its."""
    monkeypatch.setenv("KLEAR_SECRET", "hunter2")
    res = run_python(
        "import os\nfor pid in os.listdir('/proc'):\n    try:\n"
        "        print(open(f'/proc/{pid}/environ', 'rb').read())\n    except OSError:\n        pass")
    assert res.returncode == 0 and "hunter2" not in res.stdout


def test_program_holds_no_privileges():
    """Not uid 0, no capability, no way to gain one; kernel settings and read-only binds stay closed."""
    prefix = os.path.realpath(sys.base_prefix)
    res = run_python(
        "import ctypes, os\n"
        "held = dict(l.split(':', 1) for l in open('/proc/self/status'))\n"
        "print(os.geteuid() != 0, int(held['CapEff'], 16), held['NoNewPrivs'].strip())\n"
        "for path in ('/proc/sys/kernel/core_pattern', '/proc/sysrq-trigger'):\n"
        "    try:\n        open(path, 'r+b').close(); print('writable')\n"
        "    except OSError:\n        print('closed')\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"print(libc.mount(None, {prefix.encode()!r}, None, 32 | 4096, None), ctypes.get_errno())  # remount rw\n"
        "print(libc.unshare(0x10000000 | 0x20000), ctypes.get_errno())  # a user + mount namespace\n"
        "print(libc.syscall(248 if os.uname().machine == 'x86_64' else 217, b'user', b'k', b'v', 1, -4),"
        " ctypes.get_errno())  # add_key: the uid's keyring outlives the sandbox\n"
        f"print(os.access({prefix!r}, os.W_OK))")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[:-1] == ["True 0 1", "closed", "closed", "-1 1", "-1 1", "-1 1",
                                            "False"]


FULL = "0 0 4294967295\n"
ALL_CAPS, NO_SYS_ADMIN = 0x1FFFEFFFFFF, 0x1FFFEFFFFFF & ~(1 << 21)


@pytest.mark.parametrize(("euid", "uid_map", "caps", "expected"), [
    (1000, FULL, 0, ("--unshare-all", "--as-pid-1", "--cap-drop", "ALL")),  # a user: bwrap's namespace maps it
    (0, FULL, ALL_CAPS, ("--unshare-pid", "--cap-add", "CAP_SETUID", "shared")),  # CI root: the prelude drops
    (0, "0 100000 65536\n", ALL_CAPS, ("--unshare-pid", "shared")),  # rootless container mapping a range
    (0, "0 1000 1\n", ALL_CAPS, ("--unshare-all", "--as-pid-1", "--uid", "65534", "--gid")),  # unshare -r by a user
    (0, FULL, NO_SYS_ADMIN, "host root"),  # a container's default capabilities
    (0, "0 0 1\n", ALL_CAPS, "host root"),  # unshare -r by root: nobody cannot be mapped
])
def test_the_program_is_never_host_root(euid, uid_map, caps, expected):
    if isinstance(expected, str):
        with pytest.raises(RuntimeError, match="Refusing to run model-written code as host root"):
            choose_isolation(euid, uid_map, uid_map, caps)
        return
    isolation = choose_isolation(euid, uid_map, uid_map, caps)
    words = (*isolation.args, *(["shared"] if isolation.shared_uid else []))
    assert all(w in words for w in expected) and ("--unshare-user" not in words)
    assert ("--cap-add" in words) == ("shared" in words)  # capabilities are kept only to become nobody
    assert ("--as-pid-1" in words) == ("shared" not in words)  # no bwrap process of the program's own uid


def test_concurrent_sandboxes_do_not_share_a_thread_limit():
    """Started by root every program is nobody: RLIMIT_NPROC (32) counted all sandboxes' threads together."""
    def threads(n: int, wait_s: float) -> str:
        return (f"import threading, time\ntime.sleep({wait_s})\nfor _ in range({n}):\n"
                "    threading.Thread(target=time.sleep, args=(3,)).start()\nprint('ok')")  # joined at exit

    with ThreadPoolExecutor(2) as pool:  # 20 threads held, then 15 more in another sandbox
        runs = list(pool.map(lambda src: run_python(src, timeout_s=20), [threads(20, 0), threads(15, 1.5)]))
    assert [r.stdout.strip() for r in runs] == ["ok", "ok"], [r.stderr[-200:] for r in runs]


def test_a_uid_leased_by_another_process_is_not_drawn(tmp_path):
    """Per-run uids were drawn at random across processes (sweep workers, DDP ranks), so two sandboxes
    could share one RLIMIT_NPROC count; a lock file per uid now leases it host-wide until released."""
    held = subprocess.Popen([sys.executable, "-c", f"""
import sys, pathlib
from klear_lab.rewards.isolation import lease_uid
uid, fd = lease_uid([64001, 64002], pathlib.Path({str(tmp_path)!r}))
print(uid, flush=True)
sys.stdin.read()
"""], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert held.stdout.readline().strip() == "64001"
        uid, fd = lease_uid([64001, 64002], tmp_path)
        assert (uid, fd is not None) == (64002, True)
        os.close(fd)
    finally:
        held.communicate("")
    uid, fd = lease_uid([64001, 64002], tmp_path)  # its holder exited: free again
    assert uid == 64001 and fd is not None
    os.close(fd)
    assert lease_uid([64003], None) == (64003, None)


def test_uid_leases_live_only_in_a_directory_no_one_else_can_write(tmp_path, monkeypatch):
    from klear_lab.rewards import isolation

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # another user could plant or hold lock files there
    monkeypatch.setattr(isolation, "LEASE_DIRS", (shared, tmp_path / "own"))
    assert isolation.lease_dir() == tmp_path / "own" and (tmp_path / "own").stat().st_mode & 0o777 == 0o700
    monkeypatch.setattr(isolation, "LEASE_DIRS", (shared,))
    assert isolation.lease_dir() is None


def test_host_files_are_invisible(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2")
    paths = [str(secret), __file__, sys.prefix, os.path.expanduser("~/.bashrc")]
    res = run_python(f"import os\nfor p in {paths!r}:\n    print(os.path.exists(p))")
    assert res.stdout.split() == ["False"] * len(paths)
    home = os.path.expanduser("~")
    listing = run_python(f"import os; print(os.listdir({home!r}) if os.path.isdir({home!r}) else [])")
    rel = os.path.relpath(os.path.realpath(sys.base_prefix), home)
    allowed = set() if rel.startswith("..") else {rel.split(os.sep)[0]}  # only the interpreter prefix
    assert set(eval(listing.stdout)) <= allowed


def test_the_hosts_name_is_not_shown():
    res = run_python("import os, socket\nprint(socket.gethostname(), os.uname().nodename)")
    assert res.stdout.split() == ["sandbox", "sandbox"], (res.stdout, res.stderr[-300:])


def test_no_network_to_host_loopback():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.setblocking(False)
        port = server.getsockname()[1]
        res = run_python(
            f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "    print('connected')\nexcept OSError as e:\n    print('refused')")
        assert res.stdout.strip() == "refused"
        with pytest.raises(BlockingIOError):
            server.accept()


def test_no_new_processes_but_threads_work():
    res = run_python(
        "import os, subprocess, threading\n"
        "t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()\n"
        "for f in (os.fork, lambda: subprocess.run(['true'])):\n"
        "    try:\n        f(); print('spawned')\n    except OSError as e:\n        print(e.errno)")
    assert res.stdout.split() == ["thread", "1", "1"]  # EPERM


def test_infinite_loop_is_killed_without_leaks():
    start = time.monotonic()
    res = run_python("while True:\n    pass", timeout_s=1.0)
    assert res.timed_out and res.returncode < 0
    assert time.monotonic() - start < 5.0
    assert not _sandboxed_pids()


def test_memory_limit():
    res = run_python("x = bytearray(2 << 30)")
    assert res.returncode == 1 and "MemoryError" in res.stderr


def test_correct_solution_passes_and_wrong_outputs_fail():
    tests = [{"input": [2, 3], "output": 5}, {"input": [[1], [2]], "output": [1, 2]},
             {"input": [0.1, 0.2], "output": 0.3}]
    run = run_function_tests("def f(a, b):\n    return a + b\n", "f", tests, timeout_s=10)
    assert (run.passed, run.status) == ((True, True, True), "ok")
    forged = "class A:\n    def __eq__(self, o): return True\ndef f(a, b):\n    print('noise'); return A()\n"
    assert run_function_tests(forged, "f", tests, timeout_s=10).passed == (False, False, False)
    peek = ("import gc\ndef f(*a):  # find the expected output anywhere in the process\n"
            "    found = (o['output'] for o in gc.get_objects() if isinstance(o, dict) and 'output' in o)\n"
            "    return next(found, 0)\n")
    assert run_function_tests(peek, "f", tests, timeout_s=10).passed == (False, False, False)


def test_a_forged_line_nested_past_the_parser_fails_only_its_candidate():
    """The host's JSON parser raised RecursionError on such a line, failing the whole reward batch."""
    deep = ("import os, sys\ndef f(a, b):\n    out = sys._getframe(1).f_globals['_out']\n"
            "    out.write('{\"i\": 0, \"out\": ' + '[' * 100000 + ']' * 100000 + '}\\n'); out.flush()\n"
            "    os._exit(0)\n")
    run = run_function_tests(deep, "f", [{"input": [2, 3], "output": 5}], timeout_s=10)
    assert (run.passed, run.status) == ((False,), "crash")


def test_missing_function_and_timeout_mid_tests():
    missing = run_function_tests("def g(): pass", "f", [{"input": [], "output": 1}], timeout_s=10)
    assert missing.status == "load_error"
    code = "def f(x):\n    while x == 2:\n        pass\n    return x\n"
    tests = [{"input": [1], "output": 1}, {"input": [2], "output": 2}, {"input": [3], "output": 3}]
    run = run_function_tests(code, "f", tests, timeout_s=1.0)
    assert (run.passed, run.status) == ((True, False, False), "timeout")


SWALLOW = ("    while x == 2:\n        try:\n            while True:\n                pass\n"
           "        except:\n            pass\n")
"""A loop whose bare ``except:`` catches the harness' per-test alarm, as generated code often has."""


def test_a_candidate_that_catches_the_test_alarm_loses_that_test_only(monkeypatch):
    """It ran on to the whole run's limit (595 s with the paper's code reward), holding up the reward batch;
    now the host kills it once silent past two test limits and runs the next tests in a fresh sandbox."""
    monkeypatch.setattr(harness, "STALL_GRACE_S", 1.0)
    tests = [{"input": [1], "output": 1}, {"input": [2], "output": 2}, {"input": [3], "output": 3}]
    run = run_function_tests("def f(x):\n" + SWALLOW + "    return x\n", "f", tests, timeout_s=60, test_timeout_s=0.5)
    assert (run.passed, run.status) == ((True, False, True), "timeout") and run.wall_s < 10, run
    at_load = "x = 2\n" + SWALLOW.replace("    ", "", 1).replace("\n    ", "\n") + "def f(x):\n    return x\n"
    run = run_function_tests(at_load, "f", tests, timeout_s=60, test_timeout_s=0.5)
    assert (run.passed, run.status) == ((False, False, False), "load_error") and "ignored" in run.info, run
    program = "x = int(input())\n" + SWALLOW.replace("    ", "", 1).replace("\n    ", "\n") + "print(x)\n"
    stdio = [{"stdin": f"{x}\n", "stdout": f"{x}\n"} for x in (2, 1, 2, 3)]
    run = run_stdio_tests(program, stdio, timeout_s=60, test_timeout_s=0.5)
    assert (run.passed, run.status) == ((False, True, False, True), "timeout") and run.wall_s < 15, run
    slow = run_stdio_tests(program, stdio, timeout_s=3, test_timeout_s=0.5, fixed_total=True)  # a hard cap holds
    assert slow.status == "timeout" and "timed out after 3 s" in slow.info and slow.wall_s < 4, slow


def test_whole_programs_on_stdin_and_stdout():
    """verl code data (CodeSub-15K, LiveCodeBench) holds stdin/stdout pairs: a program, not a function."""
    tests = [{"stdin": "3\n1 2 3\n", "stdout": "6\n"}, {"stdin": "2\n5 5\n", "stdout": "10"},
             {"stdin": "1\n7\n", "stdout": "7\n"}]
    summing = "import sys\nn = int(input())\nprint(sum(map(int, sys.stdin.readline().split())))\n"
    assert run_stdio_tests(summing, tests, timeout_s=10).passed == (True, True, True)
    binary = "import sys\ndata = sys.stdin.buffer.read().split()\nsys.stdout.write(str(sum(map(int, data[1:]))))\n"
    assert run_stdio_tests(binary, tests, timeout_s=10).passed == (True, True, True)
    wrong = "n = int(input())\nprint(n)\nexit(0)\n"
    assert run_stdio_tests(wrong, tests, timeout_s=10).passed == (False, False, False)
    failing = "import sys\nprint(6)\nsys.exit(3)\n"  # the right output, then an error exit
    assert run_stdio_tests(failing, tests[:1], timeout_s=10).passed == (False,)
    assert run_stdio_tests("print(", tests, timeout_s=10).status == "load_error"
    hang = "n = int(input())\nwhile n == 2:\n    pass\nprint(sum(map(int, input().split())))\n"
    assert run_stdio_tests(hang, tests, timeout_s=1.0).passed == (True, False, False)
    assert stdout_matches("6  \n\n", "6") and not stdout_matches("6 7", "6\n7") and not stdout_matches(6, "6")


def test_outputs_match():
    assert outputs_match([1, [2.0000001]], (1, [2]))
    assert not outputs_match(1, True) and not outputs_match("1", 1) and not outputs_match([1], [1, 2])
    assert outputs_match({"a": 1}, {"a": 1}) and not outputs_match({"a": 1}, {"b": 1})


def test_refuses_to_run_without_bwrap(monkeypatch, tmp_path):
    monkeypatch.setattr(sandbox, "_search_path", lambda: str(tmp_path))
    with pytest.raises(RuntimeError, match=r"bwrap.*apt-get install -y bubblewrap"):
        run_python("print(1)")


def _slow_start(monkeypatch, seconds: float | None) -> None:
    """Every sandbox takes ``seconds`` to start (a loaded host), or never comes up (None)."""
    real = sandbox.bwrap_argv
    def argv(*a, **kw):
        if seconds is None:
            return ["/bin/sleep", "60"]
        return ["/bin/sh", "-c", f'/bin/sleep {seconds}; exec "$@"', "sh", *real(*a, **kw)]
    monkeypatch.setattr(sandbox, "bwrap_argv", argv)


def test_a_sandbox_that_never_comes_up_is_the_hosts_error_not_a_timeout(monkeypatch):
    """It was scored as the program timing out, after the program's whole limit."""
    _slow_start(monkeypatch, None)
    monkeypatch.setattr(sandbox, "START_LIMIT_S", 1.0)
    began = time.monotonic()
    with pytest.raises(RuntimeError, match=r"sandbox was not up within 1 s .*the program never ran"):
        run_python("print(1)", timeout_s=5)
    assert time.monotonic() - began < 4


def test_a_slow_sandbox_start_is_not_the_programs_time(monkeypatch):
    """A loaded host's slow start ate the program's limit: here 1.5 s of a hard 2 s total for two 0.3 s tests."""
    _slow_start(monkeypatch, 1.5)
    res = run_python("print(1)", timeout_s=1.0)
    assert (res.stdout, res.timed_out, res.returncode) == ("1\n", False, 0) and res.ready_s >= 1.5, res
    program = "import time\nx = int(input())\ntime.sleep(0.3)\nprint(x)\n"
    tests = [{"stdin": f"{x}\n", "stdout": f"{x}"} for x in range(2)]
    for per_run in (None, 1):  # one sandbox; a sandbox per test, each start credited to the total
        run = run_stdio_tests(program, tests, timeout_s=2, test_timeout_s=1, fixed_total=True, tests_per_run=per_run)
        assert (run.passed, run.status) == ((True, True), "ok"), (per_run, run)


def _sandboxed_pids(uid: int | None = None) -> list[int]:
    """Sandboxed interpreters left alive on this machine: reparented to init, so no bwrap holds them (another
    test's sandbox, running beside this one under xdist, is not a leak); ``uid``: only that user's, alive."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                sandboxed = MARKER.encode() in f.read().split(b"\0")
            with open(f"/proc/{pid}/status") as f:
                ppid = next(int(line.split()[1]) for line in f if line.startswith("PPid:"))
            if sandboxed and (os.stat(f"/proc/{pid}").st_uid == uid if uid is not None else ppid == 1):
                pids.append(int(pid))
        except OSError:
            pass
    return pids


def test_a_slow_test_fails_alone_and_the_next_ones_run():
    """The official code gives each test its own limit: one 35 s clock for all of them failed every test after
    a slow one (and a correct solution of 16 tests of 3 s each)."""
    code = "def f(x):\n    while x == 2:\n        pass\n    return x\n"
    tests = [{"input": [1], "output": 1}, {"input": [2], "output": 2}, {"input": [3], "output": 3}]
    run = run_function_tests(code, "f", tests, timeout_s=20, test_timeout_s=0.5)
    assert (run.passed, run.status) == ((True, False, True), "timeout")
    assert run.info == "1 test(s) over 0.5 s (first: test 1)"
    hang = "n = int(input())\nwhile n == 2:\n    pass\nprint(n)\n"
    stdio = [{"stdin": "1\n", "stdout": "1"}, {"stdin": "2\n", "stdout": "2"}, {"stdin": "3\n", "stdout": "3"}]
    run = run_stdio_tests(hang, stdio, timeout_s=20, test_timeout_s=0.5)
    assert (run.passed, run.status) == ((True, False, True), "timeout")
    slow_load = "while True:\n    pass\n"
    run = run_function_tests(slow_load, "f", tests, timeout_s=20, test_timeout_s=0.5)
    assert (run.passed, run.status) == ((False, False, False), "load_error")
    assert run.info == "timed out defining the solution"
    blocked = "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n" + code  # runs on to the wall clock
    run = run_function_tests(blocked, "f", tests, timeout_s=2, test_timeout_s=0.5)
    assert (run.passed, run.status) == ((True, False, False), "timeout")


def test_the_program_cannot_erase_or_rewrite_what_it_printed():
    """stdout was a host file the program could truncate: erasing the start marker made the whole reward
    batch raise "sandbox failed to start", and a seek could rewrite the verdict lines already written."""
    res = run_python("import os\nprint('before', flush=True)\nfor fd in range(1, 32):\n    try:\n"
                     "        os.ftruncate(fd, 0); os.lseek(fd, 0, 0)\n    except OSError:\n        pass\n"
                     "print('after')")
    assert res.returncode == 0 and res.stdout == "before\nafter\n", (res.stdout, res.stderr[-300:])
    flood = run_python("import sys\nsys.stdout.write('x' * (12 << 20))\nprint('done', file=sys.stderr)",
                       limits=sandbox.SandboxLimits(fsize_mb=1), timeout_s=30)
    assert len(flood.stdout) == (1 << 20) - len("\x00klear-sandbox-up\n") and flood.stdout_full
    assert flood.stderr == "" and not flood.timed_out  # ended at the cap: what came next would be dropped
    noisy = run_python("import sys\nsys.stderr.write('x' * (12 << 20))\nprint('done')",
                       limits=sandbox.SandboxLimits(fsize_mb=1), timeout_s=30)
    assert len(noisy.stderr) == 1 << 20 and noisy.stdout == "done\n" and not noisy.stdout_full


def test_a_flood_of_blank_lines_costs_the_host_little():
    """8 M newlines on the harness' pipe cost the host 50 s of CPU and 0.5 GB (a timestamp and a JSON parse
    per line, found by a review): now lines that cannot be result lines are neither timed nor parsed, and
    the run ends once its output reaches the cap."""
    code = "import os, sys\nfd = sys._getframe(1).f_globals['_out'].fileno()\ndef f(x):\n" \
           "    while True:\n        os.write(fd, b'\\n' * 65536)\n"
    run = run_function_tests(code, "f", [{"input": [1], "output": 1}], timeout_s=30, test_timeout_s=10)
    assert run.passed == (False,) and "8 MB cap" in run.info, run  # ended at the cap, not by the clock
    assert harness_lines.over_time("\n" * (8 << 20), (), 1.0, 1) == []
    seen = []
    moved = sandbox_io._progressed(bytearray(), b"\n" * 65536 + b'{"i": 0}\n', lambda head: seen.append(head) or True)
    assert moved == (1, False) and seen == [b'{"i": 0}']  # one call, for the one line that could be a result


@pytest.mark.parametrize("forged", ['{"i": 2, "out": 2}', '{"i": -2}', '{"defined": true}'])
def test_a_line_out_of_order_on_the_harness_pipe_fails_that_test_and_ends_the_run(forged):
    """A red-team review passed a test it never ran (a result forged for test 2, then a crash at its start,
    so the host skipped it), made the host restart one test 299 times in 20 s (``{"i": -2}``), and parsed
    2.8 M forged lines (16 s of the trainer's CPU per run). Now the first such line ends the run."""
    code = ("import os, sys\ndef f(x):\n    if x == 0:\n        out = sys._getframe(1).f_globals['_out']\n"
            f"        out.write({forged!r} + '\\n'); out.flush()\n" + "        import time; time.sleep(5)\n"
            "    return x\n")
    tests = [{"input": [x], "output": x} for x in (0, 1, 2)]
    run = run_function_tests(code, "f", tests, timeout_s=30, test_timeout_s=10)
    assert (run.passed, run.status) == ((False, False, False), "crash") and harness.FOUL in run.info, run


@pytest.mark.parametrize("per_run", [None, 1])
def test_a_result_line_with_a_key_twice_counts_for_its_place_in_the_order_only(per_run):
    """``{"i": 0, "i": -2}`` passed the order check by its head, then json.loads kept the last ``i``: the host
    went back a test on every fresh sandbox and the reward call never returned (its total limit grew with
    each start); ``{"i": 0, "i": true}`` was taken as test 1's result (found by a review)."""
    code = ("import os, sys\ndef f(x):\n    if x == 2:\n        out = sys._getframe(1).f_globals['_out']\n"
            "        out.write({line!r} + '\\n'); out.flush(); os._exit(0)\n    return x\n")
    tests = [{"input": [x], "output": x} for x in range(4)]
    head = '{"i": 0' if per_run else '{"i": 2'  # test 2's place in its run: in order
    for forged in (f'{head}, "i": -2}}', f'{head}, "i": true}}', f'{head}, "out": 9, "out": 2}}'):
        run = run_function_tests(code.format(line=forged), "f", tests, timeout_s=10, test_timeout_s=1,
                                 tests_per_run=per_run)
        assert run.passed == (True, True, False, True) and run.status == "crash", (forged, run)
        assert "a result line the harness did not write" in run.info and run.wall_s < 10, (forged, run)
    twice = run_function_tests("def f(x):\n    return {1: x, '1': x}\n", "f", [{"input": [1], "output": {"1": 1}}],
                               timeout_s=10, tests_per_run=per_run)  # a returned dict's JSON repeats a key
    assert twice.status == "ok", twice  # not a forged line: compared as JSON reads it back


def test_a_defined_line_carries_no_result():
    """With a sandbox per test the ``defined`` line is not timed (the test's line is, from the sandbox's start):
    a program did test 0's work untimed while defining, wrote ``{"defined": true, "i": 0, "out": X}`` and
    exited, and passed (found by a review: 3 of 3 tests of 4 s each against a 1 s limit)."""
    forger = ("import os, sys, json\ng = sys._getframe(1).f_globals\nx = g['_P']['inputs'][0][0]\n"
              "g['_out'].write(json.dumps({'defined': True, 'i': 0, 'out': 2 * x}) + '\\n'); g['_out'].flush()\n"
              "os._exit(0)\ndef f(x):\n    pass\n")
    tests = [{"input": [x], "output": 2 * x} for x in (1, 2)]
    run = run_function_tests(forger, "f", tests, timeout_s=20, test_timeout_s=1, tests_per_run=1)
    assert run.passed == (False, False) and run.status == "crash", run


def test_results_forged_in_order_fail_every_test_of_the_run():
    """Forged in order (tests 0-2 during test 0), the harness' own line was the one out of order, and all
    three passed though each took 3 s over a 1 s limit (found by a review of the first fix)."""
    code = ("import os, sys, time\ndef f(x):\n    g = sys._getframe(1).f_globals\n    if x == 0:\n"
            "        for i in range(3):\n            g['_emit']({'i': i, 'out': i})\n    time.sleep(3)\n    return x\n")
    tests = [{"input": [x], "output": x} for x in (0, 1, 2)]
    run = run_function_tests(code, "f", tests, timeout_s=30, test_timeout_s=1)
    assert (run.passed, run.status) == ((False, False, False), "crash") and harness.FOUL in run.info, run


def test_a_sandbox_per_test_closes_the_shared_sandboxs_forging_gap():
    """In a shared sandbox, a program that finds the harness' internals can report right results for the
    later tests in order and end the sandbox, dodging their time limits (the README's one open gap). With a
    sandbox per test (the code reward's ``process_per_test``) it sees only its own test's input, and a line
    for any other test is out of order."""
    code = ("import os, sys, time\ndef f(x):\n    g = sys._getframe(1).f_globals\n    g['_disarm']()\n"
            "    time.sleep(1.5)\n"
            "    for i, args in enumerate(g['_P']['inputs']):\n        g['_emit']({'i': i, 'out': args[0]})\n"
            "    os._exit(0)\n")
    tests = [{"input": [x], "output": x} for x in (0, 1, 2)]
    shared = run_function_tests(code, "f", tests, timeout_s=30, test_timeout_s=0.2)
    assert shared.passed == (False, True, True), shared  # tests 1 and 2 never ran, yet passed
    alone = run_function_tests(code, "f", tests, timeout_s=30, test_timeout_s=0.2, tests_per_run=1)
    assert (alone.passed, alone.status) == ((False, False, False), "timeout"), alone
    forger = code.replace("enumerate(g['_P']['inputs'])", "enumerate([[0], [1], [2]])")  # guessing the inputs
    guessed = run_function_tests(forger, "f", tests, timeout_s=30, test_timeout_s=0.2, tests_per_run=1)
    assert (guessed.passed, guessed.status) == ((False, False, False), "crash") and harness.FOUL in guessed.info


def test_work_done_while_defining_the_solution_counts_against_the_limit():
    """Module-level code that switched the alarm off and did a test's work (it can read its own input
    there) passed every test at 3 s each against a 0.5 s limit with a sandbox per test, where the host only
    timed the test's call (found by a review). Defining is now timed too, and with a sandbox per test the
    test's time includes it, as a process of its own is timed."""
    code = ("import sys, time\n_g = sys._getframe(1).f_globals\n_g['_disarm']()\n_x = _g['_P']['inputs'][0][0]\n"
            "time.sleep(2.0)\ndef f(x):\n    return _x\n")
    tests = [{"input": [x], "output": x} for x in (1, 2)]
    alone = run_function_tests(code, "f", tests, timeout_s=30, test_timeout_s=0.2, tests_per_run=1)
    assert (alone.passed, alone.status) == ((False, False), "timeout"), alone
    shared = run_function_tests(code, "f", tests, timeout_s=30, test_timeout_s=0.2)
    assert (shared.passed, shared.status) == ((False, False), "load_error") and "defining" in shared.info, shared
    quick = code.replace("time.sleep(2.0)", "time.sleep(0.1)")  # within its limit: both modes pass it
    for per_run in (1, None):
        assert run_function_tests(quick, "f", [tests[0]], timeout_s=30, test_timeout_s=0.2,
                                  tests_per_run=per_run).passed == (True,)


def test_fresh_sandboxes_and_stalls_do_not_eat_the_later_tests_time(monkeypatch):
    """Each ``os._exit`` (a fresh sandbox for the next test) and each stall (a test that ignored its alarm,
    killed after its limit and 5 s) came out of the run's total, so honest tests after them timed out (a
    review: a judge passes them)."""
    tests = [{"stdin": f"{x}\n", "stdout": f"{x}"} for x in range(4)]
    stall = ("import signal, time\nx = int(input())\nif x == 0:\n    signal.pthread_sigmask(signal.SIG_BLOCK, "
             "[signal.SIGALRM])\n    time.sleep(60)\nprint(x)\n")
    run = run_stdio_tests(stall, tests, timeout_s=harness.total_limit_s(1, 4, None), test_timeout_s=1)
    assert run.passed == (False, True, True, True), run
    real = harness.run_python
    def slow_start(source, timeout_s, **kw):  # a loaded host: 0.6 s of each run's time before the program
        time.sleep(0.6)
        return real(source, timeout_s=max(timeout_s - 0.6, 0.01), **kw)

    monkeypatch.setattr(harness, "run_python", slow_start)
    exits = "import os, time\nx = int(input())\ntime.sleep(0.7)\nprint(x, flush=True)\nos._exit(0)\n"
    run = run_stdio_tests(exits, tests, timeout_s=5, test_timeout_s=1)
    assert (run.passed, run.status) == ((True,) * 4, "ok"), run


def test_state_left_in_builtins_reaches_the_next_test_only_in_a_shared_sandbox(monkeypatch):
    counter = "import builtins\nbuiltins.n = getattr(builtins, 'n', 0) + 1\nprint(builtins.n)\n"
    tests = [{"stdin": "", "stdout": "1"}] * 3
    assert run_stdio_tests(counter, tests, timeout_s=30, test_timeout_s=5).passed == (True, False, False)
    runs = []
    real = harness.run_python
    monkeypatch.setattr(harness, "run_python", lambda *a, **k: runs.append(1) or real(*a, **k))
    alone = run_stdio_tests(counter, tests, timeout_s=30, test_timeout_s=5, tests_per_run=1)
    assert (alone.passed, alone.status, len(runs)) == ((True,) * 3, "ok", 3), alone


def test_shared_memory_and_ptrace_are_refused():
    """System V shared memory lived outside the address-space limit (150 MB segments under 200 MB), and
    ptrace could stop bwrap's pid 1, which has none of the prelude's limits."""
    res = run_python(
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nx86 = os.uname().machine == 'x86_64'\n"
        "print(libc.shmget(0, 1 << 20, 0o1600), ctypes.get_errno())\n"
        "print(libc.msgget(0, 0o1600), ctypes.get_errno())\n"
        "print(libc.semget(0, 1, 0o1600), ctypes.get_errno())\n"
        "print(libc.ptrace(16, 1, 0, 0), ctypes.get_errno())\n")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[:-1] == ["-1 1"] * 4  # EPERM


def test_a_thread_bomb_stops_at_the_process_limit():
    """Started by root every sandbox was nobody without RLIMIT_NPROC: 2,500 threads in 64 MB, enough at the
    default 1 GB to take every pid of the host. Each run now has a uid of its own and the limit of 32."""
    res = run_python(  # 16 KiB stacks: the address-space limit alone let 2,500 such threads start
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nattr = ctypes.create_string_buffer(64)\n"
        "libc.pthread_attr_init(attr); libc.pthread_attr_setstacksize(attr, 16384)\n"
        "tid, start, n = ctypes.c_ulong(), ctypes.cast(libc.pause, ctypes.c_void_p), 0\n"
        "while n < 300 and libc.pthread_create(ctypes.byref(tid), attr, start, None) == 0:\n    n += 1\n"
        "print(n, flush=True)\nos._exit(0)", timeout_s=30)
    assert res.returncode == 0 and 0 < int(res.stdout) < 32, (res.stdout, res.stderr[-300:])


@pytest.mark.parametrize("bad", [{"memory_mb": -1}, {"fsize_mb": 0}, {"nproc": 1.5}, {"cpu_s": 0}])
def test_limits_that_would_be_none_are_refused(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        sandbox.SandboxLimits(**bad)
    for timeout in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="timeout_s must be a finite number > 0"):
            run_python("print(1)", timeout_s=timeout)


def test_memfds_and_io_uring_are_refused():
    """A ring keeps the files registered in it alive after the program closes them: memfds parked in rings
    held 3 GiB of host memory under a 1 GiB address-space limit (found by a review)."""
    res = run_python(
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
        "try:\n    os.memfd_create('x'); print('memfd')\nexcept OSError as e:\n    print(e.errno)\n"
        "print(libc.syscall(425, 4, ctypes.create_string_buffer(120)), ctypes.get_errno())  # io_uring_setup\n"
        "print(libc.syscall(427, 0, 0, None, 0), ctypes.get_errno())  # io_uring_register\n")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[:-1] == ["1", "-1 1", "-1 1"]  # EPERM


WRITES = ("import os\nfor d in ('/', '/dev', '/dev/shm', '/tmp'):\n    try:\n"
          "        open(os.path.join(d, 'blob'), 'wb').write(b'x' * 4096); print('wrote')\n"
          "    except OSError as e:\n        print(e.errno)\nopen('/dev/null', 'w').write('x'); print('null')\n")
"""Writes 4 KiB to the sandbox's root, /dev, /dev/shm and /tmp; prints ``wrote`` or the errno of each."""


def test_only_tmp_is_writable():
    res = run_python(WRITES)
    assert res.stdout.split() == ["30", "30", "30", "wrote", "null"], (res.stdout, res.stderr[-300:])  # EROFS


UNPRIVILEGED = pytest.mark.skipif(os.geteuid() != 0 or not os.access("/usr/bin/python3", os.X_OK),
                                  reason="becomes an unprivileged user to run bwrap the way a non-root researcher does")


def run_unprivileged(monkeypatch, program: str, kill_after_s: float | None = None) -> list[str]:
    """``program``'s output words, run by bwrap started as ``nobody`` (bwrap's own user namespace, as for a
    researcher's account; /root's interpreter is closed to nobody, so the system's). ``kill_after_s``: kill
    bwrap's process group then, as :func:`run_python` does on a timeout."""
    from klear_lab.rewards.seccomp import no_fork_filter

    monkeypatch.setattr(sandbox, "_python", lambda: ("/usr/bin/python3", "/usr"))
    isolation = choose_isolation(1000, "0 0 4294967295\n", "0 0 4294967295\n", 0)
    read, write = os.pipe()
    os.write(write, no_fork_filter())
    os.close(write)

    def become_nobody():
        os.setgroups([])
        os.setresgid(65534, 65534, 65534)
        os.setresuid(65534, 65534, 65534)

    argv = sandbox.bwrap_argv(sandbox.SandboxLimits(), 20, read, isolation, 65534)
    try:
        with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              pass_fds=(read,), preexec_fn=become_nobody, env={}, start_new_session=True) as proc:
            try:
                out, err = proc.communicate(program.encode(), timeout=kill_after_s or 60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                try:
                    out, err = proc.communicate(timeout=10)
                except subprocess.TimeoutExpired:  # a program alive after bwrap holds its pipes open
                    for pid in _sandboxed_pids(uid=65534):
                        os.kill(pid, signal.SIGKILL)
                    raise AssertionError("a sandboxed program outlived bwrap's kill") from None
    finally:
        os.close(read)
    return out.decode().split("\n", 1)[-1].split() or [err.decode()[-300:]]  # after the prelude's start line


@UNPRIVILEGED
def test_only_tmp_is_writable_when_bwrap_runs_unprivileged(monkeypatch):
    """Unprivileged, bwrap makes the new root and /dev tmpfs owned by the caller: writable, and as large as half
    the host's memory (a review filled 384 MiB there past the 64 MiB /tmp)."""
    assert run_unprivileged(monkeypatch, WRITES) == ["30", "30", "30", "wrote", "null"]


PROCESSES = ("import os\nprint(os.getpid(), os.getuid(), *sorted(p for p in os.listdir('/proc') if p.isdigit()))\n"
             "try:\n    os.close(os.open('/proc/1/mem', os.O_RDWR)); print('opened')\n"
             "except OSError as e:\n    print('refused', e.errno)\n")


@UNPRIVILEGED
def test_unprivileged_no_bwrap_process_of_the_programs_uid_shares_its_sandbox(monkeypatch):
    """bwrap's pid-1 reaper ran as the program's uid without its limits: a review wrote machine code into it
    through /proc/1/mem and held 1.5 GiB past a 256 MiB RLIMIT_AS. Now the program is pid 1, alone."""
    assert run_unprivileged(monkeypatch, PROCESSES) == ["1", "65534", "1", "opened"]  # its own memory, no other


CLEAR_PDEATHSIG = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                   "print(libc.prctl(1, 0, 0, 0, 0), ctypes.get_errno(), flush=True)\n")  # PR_SET_PDEATHSIG, 0


@UNPRIVILEGED
def test_unprivileged_a_killed_sandbox_leaves_no_program_behind(monkeypatch):
    """With the program as pid 1 its --die-with-parent is its own: killing bwrap still ends it, also when it
    tries to clear that (a review did, and slept on after the reward returned: now prctl is refused)."""
    out = run_unprivileged(monkeypatch, CLEAR_PDEATHSIG + "import time\nwhile True:\n    time.sleep(0.1)\n",
                           kill_after_s=1.0)
    assert out == ["-1", "1"]  # EPERM
    deadline = time.monotonic() + 5
    while _sandboxed_pids(uid=65534) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _sandboxed_pids(uid=65534)


def test_started_by_root_the_sandboxs_pid_1_is_out_of_the_programs_reach():
    """The reaper stays there (it carries --die-with-parent: the prelude's uid change clears the program's)."""
    res = run_python(PROCESSES)
    pid, uid, *pids, verdict, errno = res.stdout.split()
    assert (uid != "0", pid != "1", "1" in pids, verdict, errno) == (True, True, True, "refused", "13"), res.stdout


IGNORE_ALARM = "import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
SPIN = "    if x == 2:\n        end = time.monotonic() + {s}\n        while time.monotonic() < end:\n            pass\n"


def test_a_test_over_its_limit_fails_though_the_program_ignores_the_alarm():
    """The per-test limit inside the sandbox is an alarm: a program that ignored it passed a test 2 s over
    a 0.5 s limit (up to the 5 s stall grace). The host times each test by its result lines."""
    tests = [{"input": [x], "output": x} for x in (1, 2, 3)]
    code = IGNORE_ALARM + "def f(x):\n" + SPIN.format(s=2.5) + "    return x\n"
    run = run_function_tests(code, "f", tests, timeout_s=30, test_timeout_s=0.5)
    assert (run.passed, run.status) == ((True, False, True), "timeout"), run
    program = IGNORE_ALARM + "x = int(input())\n" + SPIN.format(s=2.5).replace("    ", "", 1).replace("\n    ", "\n") \
        + "print(x)\n"
    stdio = run_stdio_tests(program, [{"stdin": f"{x}\n", "stdout": f"{x}\n"} for x in (1, 2, 3)], timeout_s=30,
                            test_timeout_s=0.5)
    assert (stdio.passed, stdio.status) == ((True, False, True), "timeout"), stdio
    honest = run_function_tests("def f(x):\n    return x\n", "f", tests, timeout_s=30, test_timeout_s=0.5)
    assert honest.passed == (True, True, True) and honest.status == "ok"


def test_writing_on_the_harness_pipe_does_not_hold_off_the_stall_limit(monkeypatch):
    """A program that found the harness' real stdout and wrote blank lines on it ran a test 7 s under a 2 s
    limit, and passed it: any output reset the host's silence clock (found by a review)."""
    monkeypatch.setattr(harness, "STALL_GRACE_S", 1.0)
    code = (IGNORE_ALARM + "import os, sys, threading\n_fd = sys._getframe(0).f_back.f_globals['_out'].fileno()\n"
            "def _beat():\n    while True:\n        time.sleep(0.2)\n        os.write(_fd, b'\\n')\n"
            "threading.Thread(target=_beat, daemon=True).start()\n"
            "def f(x):\n" + SPIN.format(s=5) + "    return x\n")
    tests = [{"input": [x], "output": x} for x in (1, 2, 3)]
    run = run_function_tests(code, "f", tests, timeout_s=30, test_timeout_s=0.5)
    assert (run.passed, run.status) == ((True, False, True), "timeout"), run


def test_a_forged_defined_line_neither_keeps_the_run_alive_nor_restarts_a_tests_clock(monkeypatch):
    """Only the first ``defined`` line counts: a later one had reset the silence limit and the test's clock."""
    monkeypatch.setattr(harness, "STALL_GRACE_S", 1.0)
    code = (IGNORE_ALARM + "import os, sys, threading\n_fd = sys._getframe(0).f_back.f_globals['_out'].fileno()\n"
            "def _beat():\n    while True:\n        time.sleep(0.2)\n        os.write(_fd, b'{\"defined\": true}\\n')\n"
            "def f(x):\n    if x == 2:\n        threading.Thread(target=_beat, daemon=True).start()\n"
            + SPIN.format(s=4).replace("    if x == 2:\n", "") + "        os.write(_fd, b'{\"defined\": true}\\n')\n"
            "    return x\n")
    tests = [{"input": [x], "output": x} for x in (1, 2, 3)]
    run = run_function_tests(code, "f", tests, timeout_s=30, test_timeout_s=0.5)
    assert not any(run.passed) and harness.FOUL in run.info, run  # now: a forged line fails the rest


def test_long_result_lines_still_count_as_progress(monkeypatch):
    """The watchdog kept a long line's tail, which never parsed: later tests looked silent and timed out."""
    monkeypatch.setattr(harness, "STALL_GRACE_S", 1.0)
    program = "import time\nn = int(input())\ntime.sleep(1.0)\nprint('x' * 200000)\nprint(n)\n"
    tests = [{"stdin": f"{x}\n", "stdout": "x" * 200000 + f"\n{x}\n"} for x in (1, 2, 3)]
    run = run_stdio_tests(program, tests, timeout_s=30, test_timeout_s=1.5)
    assert run.passed == (True, True, True) and run.status == "ok", run


STDIO_IDIOMS = {
    "open(0)": "a, b = map(int, open(0).read().split())\nprint(a + b)\n",
    "os.read(0)": "import os\na, b = map(int, os.read(0, 1 << 20).split())\nprint(a + b)\n",
    "fileno fast I/O": ("import os, sys\nfd = sys.stdin.fileno()\ndata = os.read(fd, max(os.fstat(fd).st_size, 8192))\n"
                        "a, b = map(int, data.split())\nos.write(sys.stdout.fileno(), b'%d\\n' % (a + b))\n"),
    "thread for deep recursion": ("import sys, threading\nsys.setrecursionlimit(10 ** 6)\n"
                                  "threading.stack_size(1 << 26)\ndef main():\n    import time\n"
                                  "    time.sleep(0.2)\n    a, b = map(int, input().split())\n"
                                  "    print(a + b)\nthreading.Thread(target=main).start()\n"),
    "its own file on fd 1": ("out = open(1, 'w')\ndef solve():\n    a, b = map(int, input().split())\n"
                             "    out.write(str(a + b))\nsolve()\n"),  # flushed when collected (a cycle)
    "atexit fast output": ("import atexit, io, sys\n_buf = sys.stdout = io.StringIO()\n"
                           "@atexit.register\ndef _write():\n    sys.__stdout__.write(_buf.getvalue())\n"
                           "a, b = map(int, input().split())\nprint(a + b)\n"),
    "a _thread left printing": ("import _thread, os, time\n"
                                "_thread.start_new_thread(lambda: (time.sleep(0.3), os.write(1, b'LEAK')), ())\n"
                                "a, b = map(int, input().split())\nprint(a + b)\n"),  # not into the next test
    "sys.__stdout__": "import sys\na, b = map(int, input().split())\nprint(a + b, file=sys.__stdout__)\n",
    "buffered, then os._exit(0)": ("import os, sys\na, b = map(int, input().split())\nsys.stdout.write(str(a + b))\n"
                                   "sys.stdout.flush()\nos._exit(0)\n"),
}


@pytest.mark.parametrize("name", STDIO_IDIOMS)
def test_competitive_programming_io_idioms_pass(name):
    """Each ran as a process of its own passes the official judge; in a BytesIO world they all failed
    (fd 0 was /dev/null, fd 1 the void, no ``fileno``, threads never joined; found by a review)."""
    tests = [{"stdin": "3 4\n", "stdout": "7\n"}, {"stdin": "1 2\n", "stdout": "3"}]
    run = run_stdio_tests(STDIO_IDIOMS[name], tests, timeout_s=30, test_timeout_s=5)
    assert (run.passed, run.status) == ((True, True), "ok"), run


READ = "import atexit, os, posix, sys, threading, time\na, b = map(int, input().split())\n"
OS_EXIT = {  # program -> passes a judge (both tests), as a process of its own has it
    "unflushed": ("print(a + b)\nos._exit(0)\n", False),
    "flushed, exit code 256": ("print(a + b, flush=True)\nos._exit(256)\n", True),
    "posix._exit": ("print(a + b, flush=True)\nposix._exit(0)\n", True),
    "atexit skipped": ("atexit.register(lambda: print(a + b, flush=True))\nos._exit(0)\n", False),
    "exit inside atexit": ("atexit.register(lambda: print('junk', flush=True))\n"
                           "atexit.register(lambda: (print(a + b, flush=True), os._exit(0)))\n", True),
    "finally skipped": ("try:\n    print(a + b)\n    os._exit(0)\nfinally:\n    sys.stdout.flush()\n", False),
    "except skipped": ("try:\n    print(a + b, flush=True)\n    os._exit(0)\nexcept BaseException:\n"
                       "    print('oops')\n", True),
    "with skipped": ("with open(1, 'w') as out:\n    out.write(str(a + b))\n    os._exit(0)\n", False),
    "from a thread, unflushed": ("threading.Thread(target=lambda: (time.sleep(0.1), print(a + b), os._exit(0)))"
                                 ".start()\n", False),  # printed after __main__ ended (and flushed)
    "from a thread, exit 1": ("threading.Thread(target=lambda: (print(a + b, flush=True), os._exit(1))).start()\n",
                              False),
    "from a thread, main waits": ("t = threading.Thread(target=lambda: (print(a + b, flush=True), os._exit(0)))\n"
                                  "t.start()\nt.join()\nprint('done')\n", True),
    "threads killed": ("threading.Thread(target=lambda: (time.sleep(2), print('late', flush=True))).start()\n"
                       "print(a + b, flush=True)\nos._exit(0)\n", True),
    "flushed as __main__ ends, thread exits": (
        "print(a + b)\nthreading.Thread(target=lambda: (time.sleep(0.1), os._exit(0))).start()\n", True),
    "flushed as __main__ ends, atexit exits": ("atexit.register(os._exit, 0)\nprint(a + b)\n", True),
    "status keyword": ("print(a + b, flush=True)\nos._exit(status=0)\n", True),
    "status None": ("print(a + b, flush=True)\nos._exit(None)\n", False),
    "a daemon exits after main ends": ("threading.Thread(target=lambda: (time.sleep(0.2), os._exit(3)), daemon=True)"
                                       ".start()\nprint(a + b)\n", True),
}


@pytest.mark.parametrize("name", OS_EXIT)
def test_os_exit_ends_the_test_as_it_ends_a_process(name, tmp_path):
    """``os._exit`` drops Python's buffers (stdout to a file is block-buffered), runs no ``finally``,
    ``with`` or ``atexit`` code and kills the threads, from any thread; the harness flushed for it, ran
    them or waited (a review's table). Each verdict is checked against a real process, as a judge runs it."""
    program, passes = OS_EXIT[name]
    tests = [{"stdin": "3 4\n", "stdout": "7"}, {"stdin": "1 2\n", "stdout": "3"}]
    judged, solution = [], tmp_path / "solution.py"  # a file, as judges run it (`-c` does not flush as __main__ ends)
    solution.write_text(READ + program)
    for t in tests:
        real = subprocess.run([sys.executable, str(solution)], input=t["stdin"], capture_output=True,
                              text=True, env={"PATH": "/usr/bin:/bin"}, timeout=30)
        judged.append(real.returncode == 0 and stdout_matches(real.stdout, t["stdout"]))
    assert judged == [passes] * 2, judged
    run = run_stdio_tests(READ + program, tests, timeout_s=30, test_timeout_s=1)
    assert run.passed == (passes, passes), run  # "threads killed": not held 2 s past a 1 s limit


def test_a_crash_fails_its_test_only():
    """A segfault (or the memory limit) ended the one harness process: every later test failed, where the
    official code, a process per test, loses only that one."""
    segv = "import ctypes\nx = int(input())\nif x == 0:\n    ctypes.string_at(0)\nprint(x)\n"
    tests = [{"stdin": f"{x}\n", "stdout": f"{x}\n"} for x in (0, 1, 0, 2)]
    run = run_stdio_tests(segv, tests, timeout_s=30, test_timeout_s=5)
    assert (run.passed, run.status) == ((False, True, False, True), "crash"), run
    assert "exit -11" in run.info or "exit 139" in run.info, run
    func = "import ctypes\ndef f(x):\n    if x == 0:\n        ctypes.string_at(0)\n    return x\n"
    run = run_function_tests(func, "f", [{"input": [x], "output": x} for x in (1, 0, 2)], timeout_s=30)
    assert (run.passed, run.status) == ((True, False, True), "crash"), run


def test_large_outputs_and_inputs_are_judged_per_test(monkeypatch):
    """All tests' result lines shared one 8 MB pipe cap (tests after it failed), and all inputs were parsed
    inside the one program (16 stdins of 10 MB died of the memory limit before it ran)."""
    program = "n = int(input())\nprint(' '.join(map(str, range(n))))\n"
    n = 250_000  # ~1.6 MB of output per test: 6 tests pass the cap together
    tests = [{"stdin": f"{n + k}\n", "stdout": " ".join(map(str, range(n + k))) + "\n"} for k in range(6)]
    run = run_stdio_tests(program, tests, timeout_s=60, test_timeout_s=10)
    assert (run.passed, run.status) == ((True,) * 6, "ok"), run
    monkeypatch.setattr(harness, "PAYLOAD_BUDGET", 1 << 10)  # 4 runs of 2 KB stdins (the budget in miniature)
    echo = "import sys\ndata = sys.stdin.read()\nprint(len(data))\n"
    tests = [{"stdin": "x" * 2000, "stdout": "2000"} for _ in range(4)]
    runs = []
    real = harness.run_python
    monkeypatch.setattr(harness, "run_python", lambda *a, **k: runs.append(1) or real(*a, **k))
    assert run_stdio_tests(echo, tests, timeout_s=60).passed == (True,) * 4 and len(runs) == 4


def test_outputs_compare_as_the_official_code_does():
    """The official code compares ``got.strip() == expected.strip()``; leading blank lines and spaces failed."""
    assert stdout_matches("\n7\n", "7") and stdout_matches(" 7\n", "7") and stdout_matches("1 \n2\n\n", "1\n2")
    assert not stdout_matches("1\n\n2", "1\n2") and not stdout_matches("7", "8") and not stdout_matches(7, "7")
    assert stdout_matches("1\r\n2\r\n", "1\n2") and not stdout_matches("1\x0c2", "1\n2")  # lines end at \n only


def test_a_missing_function_is_named_and_no_core_file_can_be_written():
    missing = run_function_tests("def g(): pass", "f", [{"input": [], "output": 1}], timeout_s=10)
    assert missing.status == "load_error" and "defines no function 'f'" in missing.info, missing
    res = run_python("import resource\nprint(resource.getrlimit(resource.RLIMIT_CORE))")
    assert res.stdout == "(0, 0)\n", res
