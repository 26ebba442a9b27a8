"""``eval.engine: rollout``: held-out completions decoded by a rollout engine (here the ``hf`` one;
vLLM's in tests/integration/test_rollout_vllm.py)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import pytest
import torch

from klear_lab.config.compose import compose
from klear_lab.dry_run import eval_row
from klear_lab.errors import ConfigError
from klear_lab.eval.engine import EvalEngine
from klear_lab.eval.heldout import Sampling, evaluate
from klear_lab.registry import MODEL
from klear_lab.rl.rollout.base import RolloutRuntime
from klear_lab.rl.rollout.hf import HFRollout

MAX_NEW = 12


@dataclass
class _Verdict:
    acc: bool


def even_length(completions, records):
    return [_Verdict(len(c) % 2 == 0) for c in completions]


@pytest.fixture(scope="module")
def world(make_tiny_lm):
    return make_tiny_lm(4)


def test_greedy_through_an_engine_is_argmax_decoding(world, reference_greedy):
    tok, model, recs = world
    engine = EvalEngine(config=HFRollout(batch_size=3))
    via = evaluate(model, tok, recs, {"math": even_length}, MAX_NEW, 4, engine=engine)
    expected = reference_greedy(model, tok, [r.prompt for r in recs], MAX_NEW)
    assert [c[0] for c in via.completions] == expected and len(set(expected)) > 1  # a shuffled order would show


def test_engine_samples_are_seeded_per_record_and_leave_the_rng_alone(world):
    tok, model, recs = world
    engine = EvalEngine(config=HFRollout(batch_size=8))
    state = torch.get_rng_state()
    a = evaluate(model, tok, recs, {"math": even_length}, MAX_NEW, 4, Sampling(samples=3, temperature=1.0, seed=5),
                 engine)
    assert torch.equal(torch.get_rng_state(), state), "evaluation must not move the training RNG"
    b = evaluate(model, tok, recs, {"math": even_length}, MAX_NEW, 4, Sampling(samples=3, temperature=1.0, seed=5),
                 engine)
    c = evaluate(model, tok, recs, {"math": even_length}, MAX_NEW, 4, Sampling(samples=3, temperature=1.0, seed=6),
                 engine)
    assert [len(x) for x in a.completions] == [3] * 4 and a.completions == b.completions != c.completions
    assert a.verdicts == [[len(x) % 2 == 0 for x in xs] for xs in a.completions]
    near_greedy = evaluate(model, tok, recs, {"math": even_length}, MAX_NEW, 4,
                           Sampling(samples=2, temperature=1e-6), engine)
    greedy = evaluate(model, tok, recs, {"math": even_length}, MAX_NEW, 4)
    assert near_greedy.completions == [[g[0], g[0]] for g in greedy.completions]  # sample k of record i is i's


class _Counting(RolloutRuntime):
    """A real HF runtime that counts weight syncs and closes."""

    def __init__(self, model, tokenizer):
        self.inner, self.syncs, self.closed = HFRollout().start(model, tokenizer), [], 0

    def generate(self, *args, **kwargs):
        return self.inner.generate(*args, **kwargs)

    def sync_weights(self, model):
        self.syncs.append(model)
        self.inner.sync_weights(model)

    def close(self):
        self.closed += 1


@dataclass(frozen=True)
class _CountingRollout:
    def start(self, model, tokenizer):
        return _Counting(model, tokenizer)


def test_an_owned_engine_starts_once_syncs_later_and_closes(world):
    tok, model, _ = world
    engine = EvalEngine(config=_CountingRollout())
    first = engine.runtime(model, tok)
    assert first.syncs == []  # started from the model: nothing to sync yet
    other = MODEL.build({"name": "qwen2", "size": "2m"}).build(tok)
    assert engine.runtime(other, tok) is first and first.syncs == [other]
    engine.close()
    engine.close()
    assert first.closed == 1
    assert engine.runtime(model, tok) is not first  # a closed engine is started again on demand


def test_a_shared_engine_is_used_as_it_is_and_never_closed(world):
    tok, model, _ = world
    running = _Counting(model, tok)
    engine = EvalEngine(shared=running)
    assert engine.runtime(model, tok) is running and running.syncs == []  # RL pushes weights itself
    engine.close()
    assert running.closed == 0
    with pytest.raises(ValueError, match="exactly one"):
        EvalEngine()


def test_which_runs_get_an_engine():
    from klear_lab.builders import eval_engine

    vllm = ["eval.engine=rollout", "rl.rollout.name=vllm"]
    running = object()
    assert eval_engine(compose(None, ["run.kind=rl", *vllm]), shared=running).shared is running  # RL: its own
    if importlib.util.find_spec("vllm") is not None:
        assert eval_engine(compose(None, ["run.kind=sft", *vllm])).config.__class__.__name__ == "VLLMRollout"
    else:
        with pytest.raises(ConfigError, match="needs the vllm package"):  # checked before anything runs
            eval_engine(compose(None, ["run.kind=sft", *vllm]))
    # an hf rollout engine is what generate runs: eval.batch_size batches either way
    assert eval_engine(compose(None, ["run.kind=sft", "eval.engine=rollout"])) is None
    assert eval_engine(compose(None, ["run.kind=rl", "rl.rollout.name=vllm"]), shared=running) is None


def test_unknown_engine_is_refused():
    with pytest.raises(ConfigError, match=r"eval.engine must be one of \('generate', 'rollout'\), got 'vllm'"):
        compose(None, ["run.kind=sft", "eval.engine=vllm"])


def test_the_plan_names_the_engine():
    generate = compose(None, ["run.kind=sft"])
    assert "transformers generate, 100 per batch" in eval_row(generate)[1]
    hf = compose(None, ["run.kind=sft", "eval.engine=rollout", "eval.samples=4", "eval.temperature=0.6"])
    assert eval_row(hf)[1].startswith("avg@4, temperature 0.6") and "transformers generate" in eval_row(hf)[1]
    row = eval_row(compose(None, ["run.kind=sft", "eval.engine=rollout", "rl.rollout.name=vllm"]))[1]
    assert "rollout engine 'vllm'" in row
    assert ("NOT AVAILABLE HERE" in row) == (importlib.util.find_spec("vllm") is None)


def test_an_rl_plan_shares_the_rollout_engine_for_evaluation():
    cfg = compose(None, ["run.kind=rl", "eval.engine=rollout", "rl.rollout.name=vllm", "trainer.devices=2"])
    row = eval_row(cfg)[1]
    assert row.endswith("rollout engine 'vllm' (shared with the rollouts)")  # not the several-devices refusal
