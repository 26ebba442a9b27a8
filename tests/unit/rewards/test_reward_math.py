"""math_verify reward: table-driven values (paper §3.1), helpers, pool path and timeout score."""

from __future__ import annotations

import time

import pytest

from klear_lab.data.records import Record
from klear_lab.registry import REWARD
from klear_lab.rewards import math_verify as mv_module
from klear_lab.rewards.base import answer_part, last_boxed, split_think
from klear_lab.rewards.math_verify import MathVerifyReward


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def rec(answer: str) -> Record:
    return Record(uid="t/0", source="t", task="math", prompt="?", answer=answer)


T = "<think>reasoning</think>"
CASES = [  # (completion, ground truth, expected score, info)
    (f"{T} The answer is \\boxed{{42}}.", "42", 1.0, "exact"),
    (f"{T} \\boxed{{41}}", "42", -1.0, "wrong"),
    (f"{T} \\boxed{{0.5}}", "1/2", 1.0, "verified"),
    (f"{T} \\boxed{{1/2}}", "0.5", 1.0, "verified"),
    (f"{T} \\boxed{{\\frac{{1}}{{2}}}}", "0.5", 1.0, "verified"),
    (f"{T} \\boxed{{\\dfrac12}}", "\\frac{1}{2}", 1.0, "verified"),
    (f"{T} \\boxed{{0.51}}", "1/2", -1.0, "wrong"),
    (f"{T} no answer at all", "42", -1.0, "wrong"),
    ("<think>reasoning, cut off \\boxed{42}", "42", -0.5, "no </think>"),   # truncated
    ("reasoning</think> \\boxed{42}", "42", -2.0, "no <think>"),
    ("no tags \\boxed{42}", "42", -0.5, "no </think>"),                    # both missing: -0.5 first
    ("<think>\\boxed{42}</think> \\boxed{7}", "42", -1.0, "wrong"),          # think part not judged
    ("<think>a</think> \\boxed{1} <think>b</think> \\boxed{42}", "42", 1.0, "exact"),  # after LAST </think>
    ("<think>a</think> \\boxed{42} <think>b</think> \\boxed{1}", "42", -1.0, "wrong"),
]


@pytest.fixture(scope="module")
def reward():
    with MathVerifyReward() as r:  # default inline_below=16: a batch of 14 is scored inline
        yield r


@pytest.fixture(scope="module")
def table_outputs(reward):
    return reward([c for c, *_ in CASES], [rec(gt) for _, gt, *_ in CASES])


@pytest.mark.parametrize("k", range(len(CASES)))
def test_table(table_outputs, k):
    completion, gt, score, info = CASES[k]
    out = table_outputs[k]
    assert (out.score, out.info) == (score, info), completion
    assert out.acc == (score == 1.0)
    assert out.format_ok == (info not in ("no </think>", "no <think>"))


def test_pool_path_matches_inline(reward):
    pooled = MathVerifyReward(inline_below=0, workers=1)
    try:
        outs = pooled([c for c, *_ in CASES], [rec(gt) for _, gt, *_ in CASES])
    finally:
        pooled.close()
    assert [o.score for o in outs] == [s for *_, s, _ in CASES]


def test_registered_defaults_are_paper_values():
    r = REWARD.build({"name": "math_verify"})
    values = (r.correct, r.wrong, r.missing_think_close, r.missing_think_open, r.timeout_s)
    assert values == (1.0, -1.0, -0.5, -2.0, 5.0)


@pytest.mark.parametrize(("field", "value"),
                         [("timeout_s", 0.0), ("workers", 0), ("wrong", 1.0), ("inline_below", -1)])
def test_bad_values_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        MathVerifyReward(**{field: value})


def test_length_mismatch_raises(reward):
    with pytest.raises(ValueError, match="one record per completion"):
        reward(["a", "b"], [rec("1")])


def test_helpers():
    assert split_think("<think>a</think>b</think>c") == ("<think>a</think>b", "c")
    assert split_think("no close") == (None, "no close")
    assert answer_part("x</think> y") == " y"
    assert last_boxed("\\boxed{1} then \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{unbalanced") is None
    assert last_boxed("nothing") is None


def fake_equivalent(item):
    """Test-only pool function: hangs on answers containing HANG, else compares stripped text."""
    answer, gt, _ = item
    if "HANG" in answer:
        time.sleep(60)
    if "SLOW" in answer:  # a slow parse plus a slow verify, each within its own alarm
        time.sleep(1.5)
        answer = answer.replace("SLOW", "")
    return answer.strip() == gt


def no_warm_up():
    """Test-only initializer: skip the math-verify import so that the test stays fast."""


def test_stuck_item_gets_timeout_score(monkeypatch):
    monkeypatch.setattr(mv_module, "equivalent_item", fake_equivalent)
    monkeypatch.setattr(mv_module, "warm_up", no_warm_up)
    r = MathVerifyReward(inline_below=0, workers=1, timeout_s=0.5)
    start = time.monotonic()
    try:
        outs = r([f"{T} HANG", f"{T} 7"], [rec("1"), rec("7")])
        pids = r._get_pool().pids
    finally:
        r.close()
    assert (outs[0].score, outs[0].acc) == (-1.0, False) and outs[0].info.startswith("timeout")
    assert (outs[1].score, outs[1].info) == (1.0, "verified")
    assert time.monotonic() - start < 10.0  # cut off, not the 60 s sleep (takes ~4.5 s)
    assert all(not _alive(pid) for pid in pids)


def test_the_pool_lets_an_item_run_as_long_as_its_alarms_allow(monkeypatch):
    """The pool killed an item at timeout_s, while inline scoring gives math-verify's parse of the answer,
    parse of the reference and verify timeout_s each: the same answer scored -1 in a batch of 16 and +1
    in a batch of 15."""
    monkeypatch.setattr(mv_module, "equivalent_item", fake_equivalent)
    monkeypatch.setattr(mv_module, "warm_up", no_warm_up)
    with MathVerifyReward(inline_below=0, workers=1, timeout_s=0.5) as r:
        (out,) = r([f"{T} SLOW 7"], [rec("7")])
        assert r.item_limit_s == 4.0  # 3 alarms of ceil(0.5) = 1 s each, + 1 s
    assert (out.score, out.info) == (1.0, "verified")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False
