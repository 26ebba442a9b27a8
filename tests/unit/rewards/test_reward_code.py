"""code reward: soft/hard/affine values (paper §3.2), format checks, test sampling, no fallback."""

from __future__ import annotations

import sys
import time

import pytest

from klear_lab.data.records import Record
from klear_lab.errors import DataError
from klear_lab.registry import REWARD
from klear_lab.rewards import sandbox
from klear_lab.rewards.code_exec import CodeExecReward, extract_code

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap is Linux-only")


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


# f(x) = 2x; the candidate below is wrong for x > 2, so it passes 2 of 4 tests
TESTS = tuple({"input": [x], "output": 2 * x} for x in (1, 2, 3, 4))
RECORD = Record(uid="c/0", source="t", task="code", prompt="write f", answer="def f(x): return 2 * x",
                tests=TESTS)
PARTIAL = "<think>double it</think>\n```python\ndef f(x):\n    return 2 * x if x <= 2 else x\n```"
CORRECT = "<think>double it</think>\n```python\ndef f(x):\n    return 2 * x\n```"


@pytest.mark.parametrize(("mode", "partial", "correct"),
                         [("soft", 0.5, 1.0), ("hard", -1.0, 1.0), ("affine", 0.0, 1.0)])
def test_mode_values(mode, partial, correct):
    out_partial, out_correct = CodeExecReward(mode=mode, workers=2)([PARTIAL, CORRECT], [RECORD, RECORD])
    assert (out_partial.score, out_partial.acc, out_partial.info) == (partial, False, "2/4 passed")
    assert (out_correct.score, out_correct.acc) == (correct, True)


def test_a_verl_code_record_scores_a_whole_program(tmp_path):
    """A verl row's stdin/stdout tests (CodeSub-15K, LiveCodeBench) used to become calls of f with the
    input string's characters: every correct program scored 0 ("load_error: KeyError: 'f'")."""
    import json

    from klear_lab.data.sources.file import FileSource

    spec = {"inputs": ["3\n1 2 3\n", "1\n5\n"], "outputs": ["6\n", "5\n"]}
    row = {"data_source": "coder1_longcot", "ability": "code", "prompt": [{"role": "user", "content": "sum"}],
           "reward_model": {"ground_truth": json.dumps(spec), "style": "rule"}}
    (tmp_path / "code.jsonl").write_text(json.dumps(row) + "\n")
    (record,) = FileSource(path=str(tmp_path / "code.jsonl")).records(0, "train")
    program = "<think>sum</think>\n```python\ninput()\nprint(sum(map(int, input().split())))\n```"
    half = "<think>sum</think>\n```python\ninput()\nprint(6)\n```"
    right, partial = CodeExecReward(workers=2)([program, half], [record, record])
    assert (right.score, right.acc, right.info) == (1.0, True, "2/2 passed")
    assert (partial.score, partial.acc) == (0.5, False)


def _verl_code_row(spec: dict) -> dict:
    import json

    return {"data_source": "coder1_longcot", "ability": "code", "prompt": [{"role": "user", "content": "echo"}],
            "reward_model": {"ground_truth": json.dumps(spec), "style": "rule"}}


def test_a_records_own_timeout_and_test_cap_apply_as_the_official_code_reads_them(tmp_path):
    """A verl spec's ``timeout`` and ``max_test_cases`` were ignored: every problem ran under the config's
    35 s per test and 16 tests."""
    import json

    from klear_lab.data.sources.file import FileSource

    echo = {"inputs": [f"{i}\n" for i in range(6)], "outputs": [f"{i}\n" for i in range(6)]}
    rows = [_verl_code_row({**echo, "max_test_cases": 2}), _verl_code_row({**echo, "timeout": 0.5})]
    (tmp_path / "code.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    capped, quick = FileSource(path=str(tmp_path / "code.jsonl")).records(0, "train")
    assert (capped.meta, quick.meta) == ({"max_tests": 2}, {"test_timeout_s": 0.5})
    program = "<think>echo</think>\n```python\nprint(input())\n```"
    (out,) = CodeExecReward(workers=1, record_limits=True)([program], [capped])
    assert (out.score, out.info) == (1.0, "2/2 passed")
    (out,) = CodeExecReward(workers=1, max_tests=None)([program], [capped])  # off by default: every test
    assert (out.score, out.info) == (1.0, "6/6 passed")
    spin = "<think>spin</think>\n```python\nn = int(input())\nwhile n == 3:\n    pass\nprint(n)\n```"
    (out,) = CodeExecReward(workers=1, timeout_s=30.0, record_limits=True)([spin], [quick])  # stops at 0.5 s
    assert (out.score, out.info.split(";")[0]) == (pytest.approx(5 / 6), "5/6 passed") and "0.5 s" in out.info


@pytest.mark.parametrize(("extra", "why"), [({"timeout": -1}, "'timeout' .* must be a positive number"),
                                             ({"timeout": float("inf")}, "'timeout' .* must be a positive number"),
                                             ({"max_test_cases": "16"}, "'max_test_cases' .* must be an integer"),
                                             ({"max_test_cases": 2.5}, "'max_test_cases' .* must be an integer")])
def test_bad_per_record_test_settings_name_the_file_row_and_field(tmp_path, extra, why):
    import json

    from klear_lab.data.sources.file import FileSource

    spec = {"inputs": ["1\n"], "outputs": ["1\n"], **extra}
    (tmp_path / "code.jsonl").write_text(json.dumps(_verl_code_row(spec)) + "\n")
    where = "code.jsonl: row 1: field 'reward_model.ground_truth': code ground truth"
    with pytest.raises(DataError, match=rf"{where} {why}"):
        FileSource(path=str(tmp_path / "code.jsonl")).records(0, "train")
    from klear_lab.data.records import require_gradeable

    spec["max_test_cases"] = 16.0  # a parquet column with gaps holds floats
    (tmp_path / "code.jsonl").write_text(json.dumps(_verl_code_row({**spec, **{"timeout": 1}})) + "\n")
    (record,) = FileSource(path=str(tmp_path / "code.jsonl")).records(0, "train")
    assert record.meta == {"test_timeout_s": 1, "max_tests": 16} and isinstance(record.meta["max_tests"], int)
    bad = Record(uid="c/7", source="s", task="code", prompt="p", answer="", tests=TESTS, meta={"max_tests": 0})
    with pytest.raises(DataError, match=r"data.sources: code record 'c/7' of source 's': meta 'max_tests' \(the test"):
        require_gradeable([bad], "data.sources")


@pytest.mark.parametrize(("completion", "score", "info"), [
    ("<think>x ```python\ndef f(x): return 2*x\n```", -0.5, "no </think>"),
    ("x</think>```python\ndef f(x): return 2*x\n```", -2.0, "no <think>"),
    ("<think>```python\ndef f(x): return 2*x\n```</think> the answer is 2x", -1.0, "no code block"),
])
def test_format_checks_come_first(completion, score, info):
    (out,) = CodeExecReward()([completion], [RECORD])
    assert (out.score, out.acc, out.format_ok, out.info) == (score, False, False, info)


def test_draw_tests_is_seeded_and_capped():
    rec = Record(uid="c/1", source="t", task="code", prompt="p", answer="",
                 tests=tuple({"input": [i], "output": i} for i in range(40)))
    r = CodeExecReward(max_tests=16)
    drawn = r.draw_tests(rec)
    assert len(drawn) == 16 and drawn == r.draw_tests(rec)
    assert drawn != CodeExecReward(max_tests=16, seed=1).draw_tests(rec)
    with pytest.raises(DataError, match="c/2"):
        r.draw_tests(Record(uid="c/2", source="t", task="code", prompt="p", answer=""))
    assert CodeExecReward(max_tests=None).draw_tests(rec) == list(rec.tests)  # evaluation: all, as LiveCodeBench


def test_each_completion_draws_its_own_tests():
    """paper.md §3.2: at most 16 tests sampled at random per evaluation. One subset per record left the
    problem's other 24 tests out of every reward; the same code still gets the same tests (reproducible)."""
    rec = Record(uid="c/1", source="t", task="code", prompt="p", answer="",
                 tests=tuple({"input": [i], "output": i} for i in range(40)))
    r = CodeExecReward(max_tests=16)
    subsets = [frozenset(t["output"] for t in r.draw_tests(rec, f"def f(x):\n    return x + {k}\n")) for k in range(8)]
    assert all(len(s) == 16 for s in subsets) and len(set(subsets)) == 8
    assert len(frozenset().union(*subsets)) > 32  # eight draws reach most of the 40 tests
    assert r.draw_tests(rec, "def f(x): return x") == r.draw_tests(rec, "def f(x): return x")


def test_the_paper_code_config_evaluates_on_every_test():
    """A program failing only tests outside the 16 drawn counted as solved: LiveCodeBench pass@1 ran high."""
    from pathlib import Path

    from klear_lab.config.compose import compose

    cfg = compose(Path(__file__).resolve().parents[3] / "experiments/paper/rl/code.yaml")
    assert cfg["eval"]["code_reward"]["max_tests"] is None and cfg["rl"]["reward"]["max_tests"] == 16
    # training as the official reward, a process per test; evaluation as LiveCodeBench, a problem's in one
    assert cfg["rl"]["reward"]["process_per_test"] and not cfg["eval"]["code_reward"]["process_per_test"]


def test_extract_code_takes_last_python_block():
    assert extract_code("```python\na = 1\n```\ntext\n```py\nb = 2\n```") == "b = 2\n"
    assert extract_code("```\nplain\n```") is None


def test_registry_defaults_and_validation():
    r = REWARD.build({"name": "code"})
    assert (r.mode, r.no_code, r.max_tests, r.timeout_s, r.func_name) == ("soft", -1.0, 16, 35.0, "f")
    for field, value in [("mode", "binary"), ("max_tests", 0), ("timeout_s", -1.0), ("func_name", "f()"),
                         ("func_name", "class")]:  # a keyword: `def class(...)` is a syntax error in the sandbox
        with pytest.raises(ValueError, match=field):
            CodeExecReward(**{field: value})


def test_missing_bwrap_raises_instead_of_running_unisolated(monkeypatch, tmp_path):
    monkeypatch.setattr(sandbox, "_search_path", lambda: str(tmp_path))
    with pytest.raises(RuntimeError, match="bubblewrap"):
        CodeExecReward()([CORRECT], [RECORD])


def test_timeout_s_is_per_test_as_the_official_code():
    """A slow test fails alone (soft 2/3), and total_timeout_s caps the whole run."""
    rec = Record(uid="c/3", source="t", task="code", prompt="p", answer="",
                 tests=tuple({"input": [i], "output": i} for i in (1, 2, 3)))
    completion = "<think>x</think>\n```python\ndef f(x):\n    while x == 2:\n        pass\n    return x\n```"
    (out,) = CodeExecReward(timeout_s=0.5)([completion], [rec])
    assert (out.score, out.acc) == (pytest.approx(2 / 3), False) and "over 0.5 s" in out.info
    (capped,) = CodeExecReward(timeout_s=5.0, total_timeout_s=1.0)([completion], [rec])
    assert capped.score == pytest.approx(1 / 3) and "timed out after 1 s" in capped.info
    with pytest.raises(ValueError, match="total_timeout_s"):
        CodeExecReward(total_timeout_s=0.0)


def test_one_completions_bad_return_value_or_bad_tests_do_not_break_the_batch():
    """``return 10**400`` against a float output raised OverflowError out of the whole reward call; tests
    the harness cannot run raised KeyError or TypeError mid-batch, naming nothing."""
    rec = Record(uid="c/9", source="t", task="code", prompt="p", answer="", tests=({"input": [1], "output": 2.5},))
    huge = "<think>t</think>\n```python\ndef f(x):\n    return 10 ** 400\n```"
    right = "<think>t</think>\n```python\ndef f(x):\n    return 2.5\n```"
    out = CodeExecReward(workers=2)([huge, right], [rec, rec])
    assert (out[0].score, out[0].acc, out[1].acc) == (0.0, False, True)
    for tests, needle in [(({"input": [1], "output": 2}, {"stdin": "1", "stdout": "2"}), "test 1: mixes"),
                          (({"input": [1]},), "test 0: a function test needs 'input'"),
                          (({"input": 5, "output": 1},), "test 0: a function test needs 'input'"),
                          (({"stdin": 1, "stdout": "2"},), "test 0: a program test needs string"),
                          (({"input": [{1, 2}], "output": 1},), "tests are not JSON values")]:
        bad = Record(uid="c/bad", source="t", task="code", prompt="p", answer="", tests=tests)
        with pytest.raises(DataError, match=f"code record 'c/bad', {needle}|code record 'c/bad': {needle}"):
            CodeExecReward().draw_tests(bad)


def test_process_per_test_runs_each_test_in_a_sandbox_of_its_own():
    """Off by default (a shared sandbox: what one test leaves in ``builtins`` reaches the next); on, each
    test starts clean, as under the official code's process per test."""
    rec = Record(uid="c/state", source="t", task="code", prompt="p", answer="",
                 tests=tuple({"stdin": "", "stdout": "1"} for _ in range(3)))
    counter = ("<think>t</think>\n```python\nimport builtins\nbuiltins.n = getattr(builtins, 'n', 0) + 1\n"
               "print(builtins.n)\n```")
    (shared,) = CodeExecReward()([counter], [rec])
    (alone,) = CodeExecReward(process_per_test=True)([counter], [rec])
    assert (shared.score, alone.score, alone.acc) == (pytest.approx(1 / 3), 1.0, True), (shared, alone)


def test_with_a_sandbox_per_test_starts_do_not_eat_the_last_tests_time(monkeypatch):
    """The default total limit, timeout_s x (tests + 1), was shared by a sandbox start per test: on a loaded
    host (here 0.6 s per start) the last of 4 tests of 0.7 s under a 1 s limit timed out (found by a review)."""
    from klear_lab.rewards import harness

    real = harness.run_python
    monkeypatch.setattr(harness, "run_python", lambda *a, **k: time.sleep(0.6) or real(*a, **k))
    rec = Record(uid="c/slow", source="t", task="code", prompt="p", answer="",
                 tests=tuple({"input": [i], "output": i} for i in range(4)))
    slow = "<think>t</think>\n```python\nimport time\ndef f(x):\n    time.sleep(0.7)\n    return x\n```"
    (out,) = CodeExecReward(timeout_s=1.0, process_per_test=True)([slow], [rec])
    assert (out.score, out.acc) == (1.0, True), out
