"""Embedded arithmetic world: problems, traces, teacher errors, held-out partition."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from klear_lab.data.sources.base import is_heldout
from klear_lab.registry import SOURCE
from klear_lab.world import arithmetic


@pytest.mark.parametrize("level", arithmetic.LEVELS)
def test_problems_evaluate_correctly(level):
    rng = random.Random(level)
    for _ in range(200):
        p = arithmetic.make_problem(rng, level)
        assert p.answer == eval(p.expr)  # our own generated expression  # noqa: S307
        assert len(p.ops) == (2 if level == 1 else 3)
        assert all(10 <= n <= 99 for n, op in zip(p.nums, ("+", *p.ops)) if op != "*")


@pytest.mark.parametrize("style", ["padded", "full", "steps", "noisy", "terse"])
def test_correct_teacher_states_the_answer(style):
    rng = random.Random(0)
    for _ in range(100):
        p = arithmetic.make_problem(rng, rng.choice(arithmetic.LEVELS))
        text, stated = arithmetic.solve(p, style=style, rng=rng)
        assert stated == p.answer and text.endswith(f"\\boxed{{{p.answer}}}")
        assert text.startswith("<think>") and "</think>" in text


def test_padded_trace_columns_are_right():
    rng = random.Random(3)
    for _ in range(300):
        left, right = rng.randint(0, 999), rng.randint(0, 999)
        op = rng.choice("+-")
        result = left + right if op == "+" else left - right
        if not 0 <= result <= 999:
            continue
        trace = arithmetic.padded_trace(left, op, right, result)
        cols = re.findall(r"(\d)[+-](\d)[+-](\d)=(\d)(\d)", trace)
        digits = "".join(d for *_, d in cols)[::-1]
        assert int(digits) == result, trace
        assert trace.endswith(f">{result:03d}")


def test_teacher_error_share_and_labels():
    recs = SOURCE.build({"name": "arith", "n_prompts": 1500, "teacher_error": 0.3}).records(0, "train")
    wrong = [r for r in recs if not r.response_correct]
    assert 0.22 < len(wrong) / len(recs) < 0.38
    for r in wrong[:50]:
        assert f"\\boxed{{{r.answer}}}" not in r.response


def test_deterministic_and_heldout_disjoint():
    src = SOURCE.build({"name": "arith_r1", "n_prompts": 300})
    assert src.records(0, "train") == src.records(0, "train")
    assert src.records(0, "train") != src.records(1, "train")
    train = {r.prompt for r in src.records(0, "train")}
    heldout = {r.prompt for r in src.records(0, "eval")}
    assert not train & heldout
    assert all(is_heldout(p) for p in heldout) and not any(is_heldout(p) for p in train)


def test_shared_prompts_give_every_teacher_the_same_prompts():
    """Table 3 compares teachers on one prompt set: with ``shared_prompts`` three teachers answer the same
    prompts in the same order, each in its own style and error rate; without, they share ~1 % of them."""
    def prompts(name: str, shared: bool, seed: int = 0) -> list[str]:
        src = SOURCE.build({"name": name, "n_prompts": 400, "levels": [1], "level_weights": [1.0],
                            "shared_prompts": shared})
        return [r.prompt for r in src.records(seed, "train")]

    teachers = ("arith_distill", "arith_qwq", "arith_r1")
    shared = [prompts(t, True) for t in teachers]
    assert shared[0] == shared[1] == shared[2] and len(set(shared[0])) == 400
    assert prompts("arith_r1", True, seed=1) != shared[2]
    own = [set(prompts(t, False)) for t in teachers]
    assert len(own[0] & own[2]) < 40 and len(own[1] & own[2]) < 40
    responses = [[r.response for r in SOURCE.build({"name": t, "n_prompts": 50, "shared_prompts": True})
                  .records(0, "train")] for t in teachers]
    assert responses[0] != responses[2]  # the teachers still answer in their own way


def test_column_facts_agree_with_padded_traces():
    from klear_lab.data.sources.arith_facts import column_fact

    recs = SOURCE.build({"name": "arith_facts", "n_records": 500}).records(0, "train")
    assert len(recs) == 500 and SOURCE.build({"name": "arith_facts"}).records(0, "eval") == []
    for r in recs[:100]:
        x, op, y, _, c = r.prompt[len("Column "):-1]
        trace = arithmetic.padded_trace(int(x), op, int(y), int(x) + int(y) if op == "+" else int(x) - int(y))
        if int(c) == 0 and (op == "+" or int(x) >= int(y)):
            assert f"{x}{op}{y}{op}0={column_fact(int(x), op, int(y), 0)}" in trace
    assert column_fact(9, "+", 6, 1) == "16" and column_fact(1, "-", 8, 0) == "13"


def test_a_split_asked_for_more_prompts_than_it_holds_is_refused_not_looped_on(monkeypatch):
    """``distinct_prompts`` drew until it had ``n_prompts`` new ones: a split holding fewer looped for ever."""
    from klear_lab.builders import build_train_records
    from klear_lab.config.compose import compose
    from klear_lab.data.sources import base
    from klear_lab.data.sources.arith import ArithSource
    from klear_lab.errors import ConfigError

    monkeypatch.setattr(base, "MAX_MISSES", 2000)  # (100,000 in use: a new prompt is rarer than that)
    few = [arithmetic.make_problem(random.Random(k), 1) for k in range(40)]  # about 36 train, 4 held out
    monkeypatch.setattr(ArithSource, "_draw", lambda self, rng: (1, p := rng.choice(few), arithmetic.prompt_text(p)))
    cfg = compose(Path(__file__).parents[3] / "experiments/quickstart/sft.yaml",
                  ["data.sources=[{name: arith, n_prompts: 50}]", "data.mix={name: all}"])
    with pytest.raises(ConfigError, match=r"^data\.sources\.0\.n_prompts: 50 distinct train prompts asked, but "
                                          r"2,000 draws in a row after the \d+th gave none new"):
        build_train_records(cfg)
    held = sum(is_heldout(arithmetic.prompt_text(p)) for p in few)
    assert len(ArithSource(n_prompts=40 - held, levels=(1,), level_weights=(1.0,)).records(0, "train")) == 40 - held
