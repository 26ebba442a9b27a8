"""Held-out evaluation: greedy, and the paper's avg@k (k seeded samples per problem, mean pass@1)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from klear_lab.builders import eval_sampling
from klear_lab.config.compose import compose
from klear_lab.data.records import Record
from klear_lab.errors import ConfigError
from klear_lab.eval.heldout import EvalResult, Sampling, evaluate
from klear_lab.stages.gain import gain_summary

MAX_NEW = 12


def _rec(i: int, level: int = 1) -> Record:
    return Record(uid=f"r{i}", source="arith", task="math", prompt=f"p{i}", answer=str(i), difficulty=level)


def test_avg_at_k_metrics_by_hand():
    result = EvalResult([_rec(0, 1), _rec(1, 1), _rec(2, 2)], [["a"] * 4] * 3,
                        [[True, False, False, False], [False] * 4, [True, True, True, False]])
    m = result.metrics("val")
    assert result.scores == [0.25, 0.0, 0.75]
    assert m["val/acc"] == pytest.approx(1 / 3) and m["val/pass_at_k"] == pytest.approx(2 / 3)
    assert m["val/level1/acc"] == pytest.approx(0.125) and m["val/level2/acc"] == 0.75
    assert m["val/arith/acc"] == pytest.approx(1 / 3) and m["val/samples"] == 4 and m["val/n"] == 3


def test_greedy_result_keeps_its_metrics():
    m = EvalResult([_rec(0), _rec(1)], [["a"], ["b"]], [[True], [False]]).metrics("val")
    assert m == {"val/acc": 0.5, "val/acc_macro": 0.5, "val/n": 2.0, "val/arith/acc": 0.5, "val/level1/acc": 0.5}


def test_records_of_unknown_difficulty_log_no_level_metric():
    """Own data without a difficulty column reads as level 1: val/level1/acc was val/acc again (a walkthrough)."""
    unknown = [dataclasses.replace(_rec(i), difficulty_known=False) for i in range(2)]
    m = EvalResult(unknown, [["a"], ["b"]], [[True], [False]]).metrics("val")
    assert not [k for k in m if "/level" in k] and m["val/acc"] == 0.5
    m = EvalResult([*unknown, _rec(2, 2)], [["a"], ["b"], ["c"]], [[True], [False], [False]]).metrics("val")
    assert [k for k in m if "/level" in k] == ["val/level2/acc"] and m["val/level2/acc"] == 0.0


def test_the_macro_mean_weighs_each_source_once():
    """Three problems of one source (all pass) and one of another (fails): pooled 3/4, macro (1 + 0) / 2."""
    recs = [_rec(0), _rec(1), _rec(2), dataclasses.replace(_rec(3), source="aime")]
    m = EvalResult(recs, [["x"]] * 4, [[True], [True], [True], [False]]).metrics("val")
    assert m["val/acc"] == 0.75 and m["val/acc_macro"] == 0.5
    assert EvalResult(recs[:3], [["x"]] * 3, [[True]] * 3).metrics("val")["val/acc_macro"] == 1.0  # one: acc


def test_paired_interval_needs_paired_problems():
    from klear_lab.stages.gain import paired_bootstrap

    lo, hi = paired_bootstrap([0.0], [1.0])  # one problem resampled is itself: no interval
    assert math.isnan(lo) and math.isnan(hi)
    with pytest.raises(ValueError, match="same problems: 3 before, 2 after"):
        paired_bootstrap([0.0, 1.0, 1.0], [1.0, 1.0])


def test_gain_uses_fractional_scores():
    recs = [_rec(i) for i in range(4)]
    start = EvalResult(recs, [["x"] * 2] * 4, [[False, False], [True, False], [True, True], [False, True]])
    end = EvalResult(recs, [["x"] * 2] * 4, [[True, False], [True, True], [True, True], [False, True]])
    g = gain_summary([(0, start), (10, end)])
    assert g["val/acc_start"] == 0.5 and g["val/acc_final"] == 0.75 and g["val/gain"] == 0.25
    # per-problem differences 0.5, 0.5, 0, 0: a resample is all 0 or all 0.5 with probability 1/16 each
    assert (g["val/gain_ci95_low"], g["val/gain_ci95_high"]) == (0.0, 0.5)


def test_a_curves_best_and_last_five_mean_overall_and_per_source():
    """Figure 2 summarises a curve by the mean of its last 5 evaluations; six evaluations of two problems
    of two sources, the first problem passing at evaluations 1, 3 and 5 (0-based), the second at 2 to 5."""
    recs = [_rec(0), dataclasses.replace(_rec(1), source="lcb")]
    evals = [(10 * i, EvalResult(recs, [["x"], ["y"]], [[i % 2 == 1], [i >= 2]])) for i in range(6)]
    g = gain_summary(evals)
    assert g["val/acc_best"] == 1.0 and g["val/acc_last5"] == pytest.approx((0.5 + 0.5 + 1 + 0.5 + 1) / 5)
    assert g["val/arith/acc_last5"] == pytest.approx(3 / 5) and g["val/lcb/acc_last5"] == pytest.approx(4 / 5)
    assert (g["val/arith/acc_best"], g["val/lcb/acc_best"]) == (1.0, 1.0)
    # curves 0.5 0.5 1 0.5 1 (arith 1 0 1 0 1, lcb 0 1 1 1 1): the largest fall below an earlier best
    assert (g["val/acc_drawdown"], g["val/arith/acc_drawdown"], g["val/lcb/acc_drawdown"]) == (0.5, 1.0, 0.0)
    assert "val/arith/acc_last5" not in gain_summary([(0, EvalResult(recs[:1], [["x"]], [[True]]))] * 2)
    fell = gain_summary([(0, EvalResult(recs, [["x"], ["y"]], [[True], [True]])),  # the start is not on the curve
                         (10, EvalResult(recs, [["x"], ["y"]], [[True], [False]]))])
    assert (fell["val/acc_best"], fell["val/acc_last5"], fell["val/acc_start"]) == (0.5, 0.5, 1.0)
    assert fell["val/acc_drawdown"] == 0.0  # one training evaluation: nothing to fall from


@dataclass
class _Verdict:
    acc: bool


class _Spy:
    """A verifier that records what it saw: passes completions of even length."""

    def __init__(self):
        self.seen: list[tuple[str, str]] = []

    def __call__(self, completions, records):
        self.seen += [(c, r.uid) for c, r in zip(completions, records)]
        return [_Verdict(len(c) % 2 == 0) for c in completions]


@pytest.fixture(scope="module")
def world(make_tiny_lm):
    return make_tiny_lm(3)


def test_samples_are_seeded_and_leave_the_rng_alone(world):
    tok, model, recs = world
    spy = _Spy()
    state = torch.get_rng_state()
    a = evaluate(model, tok, recs, {"math": spy}, MAX_NEW, 4, Sampling(samples=3, temperature=1.0, seed=5))
    assert torch.equal(torch.get_rng_state(), state), "evaluation must not move the training RNG"
    assert [len(c) for c in a.completions] == [3, 3, 3] and len(spy.seen) == 9
    assert [uid for _, uid in spy.seen] == [r.uid for r in recs for _ in range(3)]  # each sample vs its record
    assert a.verdicts == [[len(c) % 2 == 0 for c in cs] for cs in a.completions]
    b = evaluate(model, tok, recs, {"math": _Spy()}, MAX_NEW, 4, Sampling(samples=3, temperature=1.0, seed=5))
    c = evaluate(model, tok, recs, {"math": _Spy()}, MAX_NEW, 4, Sampling(samples=3, temperature=1.0, seed=6))
    assert a.completions == b.completions and a.completions != c.completions
    assert len({x for cs in a.completions for x in cs}) > 3  # the samples differ from one another


def test_a_problems_samples_do_not_depend_on_batch_size_or_shard(world):
    """A problem's samples come from its own seed (run seed + uid): eval.batch_size or the DDP split
    (rank r decodes records[r::world]) leave them unchanged."""
    tok, model, recs = world
    k3 = Sampling(samples=3, temperature=1.0, seed=5)
    whole = evaluate(model, tok, recs, {"math": _Spy()}, MAX_NEW, 9, k3)
    small = evaluate(model, tok, recs, {"math": _Spy()}, MAX_NEW, 2, k3)
    shard = evaluate(model, tok, [recs[2], recs[0]], {"math": _Spy()}, MAX_NEW, 4, k3)
    assert small.completions == whole.completions
    assert shard.completions == [whole.completions[2], whole.completions[0]]
    assert len({x for cs in whole.completions for x in cs}) > 3


def test_greedy_evaluation_is_argmax_decoding(world, reference_greedy):
    tok, model, recs = world
    expected = reference_greedy(model.eval(), tok, [r.prompt for r in recs], MAX_NEW)
    model.train()
    result = evaluate(model, tok, recs, {"math": _Spy()}, MAX_NEW, 2)  # batches of 2, left-padded
    assert [c[0] for c in result.completions] == expected
    assert all(len(c) == 1 for c in result.completions) and model.training, "evaluation restores train mode"


@pytest.mark.parametrize(("override", "needle"), [
    (["eval.samples=4"], "eval.samples is 4 with eval.temperature 0"),
    (["eval.samples=0", "eval.temperature=0.6"], "eval.samples must be >= 1"),
    (["eval.temperature=-1"], "eval.temperature must be >= 0"),
    (["eval.top_p=0", "eval.temperature=0.6"], "eval.top_p must be in (0, 1]"),
    (["eval.top_p=0.95"], "eval.top_p is 0.95 with eval.temperature 0"),
    (["eval.top_k=20"], "eval.top_k is 20 with eval.temperature 0"),
    (["eval.top_k=-1", "eval.temperature=0.6"], "eval.top_k must be an integer >= 0"),
    (["eval.repetition_penalty=0"], "eval.repetition_penalty must be > 0"),
    (["eval.samples_per_source.lcb_v5=8"], "eval.samples_per_source.lcb_v5 is 8 with eval.temperature 0"),
    (["eval.samples_per_source.lcb_v5=0", "eval.temperature=0.6"],
     "eval.samples_per_source.lcb_v5 must be an integer >= 1"),
    (["eval.samples_per_source=8"], "eval.samples_per_source: expected dict or null, got int"),
    # a file bench.v2.jsonl's label has a dot, which splits the key: said only "got {'v2': 4}"
    (["eval.samples_per_source.bench.v2=4", "eval.temperature=0.6"], "eval.samples_per_source.bench must be an "
     "integer >= 1, got {'v2': 4}; a source named with a dot, bench.v2, is set as a mapping: "
     "eval.samples_per_source={bench.v2: 4}"),
])
def test_bad_eval_sampling_is_refused(override, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        compose(None, ["run.kind=sft", *override])


def test_the_released_scripts_top_k_and_penalty_reach_the_sampler_and_only_when_set(world, monkeypatch):
    tok, model, recs = world
    assert Sampling(temperature=0.6, top_p=0.95).engine_kwargs() == {"temperature": 0.6, "top_p": 0.95}
    cfg = compose(None, ["run.kind=sft", "eval.temperature=0.6", "eval.top_k=20", "eval.repetition_penalty=1.05"])
    sampling = eval_sampling(cfg, recs)
    assert sampling.engine_kwargs() == {"temperature": 0.6, "top_p": 1.0, "top_k": 20, "repetition_penalty": 1.05}
    seen = []
    real = model.generate

    def spy(**kwargs):
        seen.append(kwargs["logits_processor"][0])
        return real(**kwargs)

    monkeypatch.setattr(model, "generate", spy)
    evaluate(model, tok, recs, {"math": _Spy()}, MAX_NEW, 6, sampling)
    warpers = {type(w).__name__: w for w in seen[0].warpers}
    assert warpers["TopKLogitsWarper"].top_k == 20 and seen[0].penalty == 1.05


def test_each_sample_belongs_to_its_own_record(world, reference_greedy):
    tok, model, recs = world
    near_greedy = evaluate(model, tok, recs, {"math": _Spy()}, MAX_NEW, 4, Sampling(samples=2, temperature=1e-6))
    greedy = reference_greedy(model.eval(), tok, [r.prompt for r in recs], MAX_NEW)
    assert near_greedy.completions == [[g, g] for g in greedy]
    assert len(set(greedy)) > 1  # records differ, so samples attached to the wrong record would show


def test_the_protocol_reaches_generate_and_hub_defaults_do_not(world, monkeypatch, reference_greedy):
    tok, model, recs = world
    prompts = [r.prompt for r in recs]
    greedy = reference_greedy(model.eval(), tok, prompts, MAX_NEW)
    model.generation_config.repetition_penalty = 50.0  # as a checkpoint's generation_config.json might
    try:
        with torch.no_grad():  # the hub setting does change raw generate(): the check below can fail
            ids = torch.tensor([tok(recs[0].prompt)["input_ids"]])
            raw = model.generate(ids, max_new_tokens=MAX_NEW, do_sample=False, pad_token_id=tok.pad_token_id)
            plain = model.generate(ids, max_new_tokens=MAX_NEW, do_sample=False, pad_token_id=tok.pad_token_id,
                                   repetition_penalty=1.0)
        assert not torch.equal(raw, plain)
        assert [c[0] for c in evaluate(model, tok, recs, {"math": _Spy()}, MAX_NEW, 4).completions] == greedy
        seen = []
        real = model.generate

        def spy(**kwargs):
            config = model.generation_config
            seen.append((kwargs["logits_processor"], config.do_sample, config.top_k, config.repetition_penalty))
            return real(**kwargs)

        monkeypatch.setattr(model, "generate", spy)
        evaluate(model, tok, recs, {"math": _Spy()}, MAX_NEW, 6, Sampling(samples=2, temperature=0.6, top_p=0.95))
    finally:
        model.generation_config.repetition_penalty = 1.0
    (recorder,), do_sample, top_k, penalty = seen[0]
    warpers = {type(w).__name__: w for w in recorder.warpers}  # applied last, right before sampling
    assert warpers["TemperatureLogitsWarper"].temperature == 0.6 and warpers["TopPLogitsWarper"].top_p == 0.95
    # the recorder draws the token; transformers takes the argmax of its one-hot scores (top_k unused)
    assert recorder.sample and (do_sample, penalty) == (False, None)


def test_mixed_k_metrics_by_hand():
    """eval.samples_per_source: avg@4 on one source, avg@2 on another; each source says its k, and the pool
    is pass@2 for every problem: 1 - C(3, 2) / C(4, 2) = 1/2 for one pass in 4 samples (it was 'any of
    4 passes' there, 'any of 2' on the other source: 2/3)."""
    code = Record(uid="c0", source="lcb", task="code", prompt="q", answer="", difficulty=1)
    result = EvalResult([_rec(0), _rec(1), code], [["a"] * 4, ["a"] * 4, ["b"] * 2],
                        [[True, False, False, False], [False] * 4, [True, True]])
    m = result.metrics("val")
    assert m["val/acc"] == pytest.approx((0.25 + 0 + 1) / 3) and m["val/pass_at_k"] == pytest.approx(1.5 / 3)
    assert m["val/arith/acc"] == pytest.approx(0.125) and m["val/lcb/acc"] == 1.0
    assert (m["val/arith/samples"], m["val/lcb/samples"]) == (4.0, 2.0) and "val/samples" not in m
    assert (m["val/arith/pass_at_k"], m["val/lcb/pass_at_k"]) == (0.5, 1.0)


def test_one_k_for_every_source_still_gives_each_sources_pass_at_k():
    """``val/<source>/pass_at_k`` came only with mixed ks, though a sweep's ``metrics:`` may name it (a review)."""
    code = Record(uid="c0", source="lcb", task="code", prompt="q", answer="", difficulty=1)
    m = EvalResult([_rec(0), _rec(1), code], [["a"] * 2] * 3, [[True, False], [False, False], [False, True]]
                   ).metrics("val")
    assert m["val/samples"] == 2.0 and (m["val/arith/samples"], m["val/lcb/samples"]) == (2.0, 2.0)
    assert (m["val/arith/pass_at_k"], m["val/lcb/pass_at_k"]) == (0.5, 1.0)
    assert "val/arith/pass_at_k" not in EvalResult([_rec(0)], [["a"]], [[True]]).metrics("val")  # greedy: none


def test_each_source_gets_its_own_samples_and_the_same_ones_it_would_alone(world):
    """A source's k changes how many samples its problems get, not which: the first 2 of avg@4 are avg@2's
    (a problem's samples come from its own seed), and the other source is decoded as without per_source."""
    tok, model, recs = world
    recs = [*recs[:2], *[dataclasses.replace(r, source="other") for r in recs[2:]]]
    spy = _Spy()
    mixed = Sampling(samples=2, temperature=1.0, seed=5, per_source=(("other", 4),))
    got = evaluate(model, tok, recs, {"math": spy}, MAX_NEW, 4, mixed)
    assert [len(c) for c in got.completions] == [2, 2, 4]
    assert [uid for _, uid in spy.seen] == [r.uid for r in recs for _ in range(len(got.completions[recs.index(r)]))]
    two = evaluate(model, tok, recs, {"math": _Spy()}, MAX_NEW, 4, Sampling(samples=2, temperature=1.0, seed=5))
    four = evaluate(model, tok, recs, {"math": _Spy()}, MAX_NEW, 4, Sampling(samples=4, temperature=1.0, seed=5))
    assert got.completions[:2] == two.completions[:2] and got.completions[2] == four.completions[2]
    assert got.completions[2][:2] == two.completions[2]
    assert got.metrics("val")["val/other/samples"] == 4.0


def test_samples_per_source_must_name_a_heldout_source(world):
    _, _, recs = world
    with pytest.raises(ConfigError, match=r"eval.samples_per_source.lcb_v5 names no held-out source "
                                          r"\(data.eval_sources give: arith;"):  # built-in sources: at compose
        compose(None, ["run.kind=sft", "eval.temperature=0.6", "eval.samples_per_source.lcb_v5=8"])
    unlabelled = "data.eval_sources=[{name: file, path: held_out.jsonl}]"  # named by its rows: known from them
    cfg = compose(None, ["run.kind=sft", "eval.temperature=0.6", "eval.samples_per_source.lcb_v5=8", unlabelled])
    with pytest.raises(ConfigError, match=r"eval.samples_per_source.lcb_v5: no held-out source is named 'lcb_v5' "
                                          r"\(data.eval_sources give: arith"):
        eval_sampling(cfg, recs)
    cfg = compose(None, ["run.kind=sft", "eval.temperature=0.6", "eval.samples=2",
                         "eval.samples_per_source.arith_r1=8", unlabelled])
    assert eval_sampling(cfg, recs).samples_for("arith_r1") == 8 and eval_sampling(cfg, recs).samples_for("x") == 2


def test_samples_per_source_can_be_cleared_to_evaluate_on_other_sources(world):
    """A config's {lcb_v5: 8} names a source a later layer's data.eval_sources may drop: null clears it
    (an empty mapping would merge into it and change nothing), and the config hashes as the default."""
    from klear_lab.tracking import config_hash

    _, _, recs = world
    final = Path(__file__).resolve().parents[3] / "experiments/paper/sft/final.yaml"
    with pytest.raises(ConfigError, match="drop it with eval.samples_per_source=null"):
        eval_sampling(compose(final), recs)
    cleared = compose(final, ["eval.samples_per_source=null"])
    assert cleared["eval"]["samples_per_source"] == {} and eval_sampling(cleared, recs).per_source == ()
    base = ["run.kind=sft", "eval.temperature=0.6"]
    assert config_hash(compose(None, [*base, "eval.samples_per_source=null"])) == config_hash(compose(None, base))
    only_aime = "data.eval_sources=[{name: file, path: data/aime24.jsonl, format: verl, label: aime24}]"
    with pytest.raises(ConfigError, match=r"eval.samples_per_source.lcb_v5 names no held-out source \(data.eval_"
                                          r"sources give: aime24;"):  # labelled sources: caught at compose
        compose(final, [only_aime])
    assert compose(final, [only_aime, "eval.samples_per_source=null"])["eval"]["samples_per_source"] == {}
    # null then the ones wanted, in one command line: those alone (a mapping alone would merge into the old)
    again = compose(final, ["eval.samples_per_source=null", "eval.samples_per_source.lcb_v5=2"])
    assert again["eval"]["samples_per_source"] == {"lcb_v5": 2} and type(again["eval"]["samples_per_source"]) is dict
    assert compose(final, ["eval.samples_per_source.lcb_v5=2"])["eval"]["samples_per_source"] == {"lcb_v5": 2,
                                                                                                 "lcb_v6": 8}


@pytest.mark.parametrize(("k", "verdicts", "expected"), [
    (1, [True, False, False, False], 0.25), (2, [True, False, False, False], 0.5),
    (4, [True, False, False, False], 1.0), (2, [True, True, False], 1.0), (3, [False] * 3, 0.0),
    (2, [True, False, True, False, False], 1 - 3 / 10)])
def test_pass_at_k_estimator_by_hand(k, verdicts, expected):
    from klear_lab.eval.heldout import pass_at

    assert pass_at(k, verdicts) == pytest.approx(expected)
