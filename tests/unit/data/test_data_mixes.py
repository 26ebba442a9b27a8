"""Data mixes: ``all``, ``top_k`` (paper Tables 4-5) and ``weighted``."""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

from klear_lab.data.mixes.base import share_metrics
from klear_lab.data.records import Record
from klear_lab.errors import ConfigError
from klear_lab.registry import DATA_MIX

RANKS = {"best": 1, "good": 2, "ok": 3, "bad": 4}


def _pools(size: int = 100) -> dict[str, list[Record]]:
    return {name: [Record(f"{name}/{i}", name, "math", f"p{i}", "1") for i in range(size)] for name in RANKS}


def _mix(spec: dict, pools=None, seed: int = 0) -> list[Record]:
    return DATA_MIX.build(spec)(pools or _pools(), RANKS, seed)


def test_registered_and_build_from_defaults():
    assert {"all", "top_k", "weighted"} <= set(DATA_MIX.names())
    for name in ("all", "top_k", "weighted"):
        DATA_MIX.build({"name": name})


def test_all_is_the_shuffled_union():
    out = _mix({"name": "all"})
    assert sorted(r.uid for r in out) == sorted(r.uid for p in _pools().values() for r in p)
    assert out == _mix({"name": "all"}) and out != _mix({"name": "all"}, seed=1)


@pytest.mark.parametrize(("k", "sources"), [(1, {"best"}), (2, {"best", "good"}), (0, set(RANKS)),
                                            (None, set(RANKS))])
def test_top_k_picks_best_ranks_within_budget(k, sources):
    out = _mix({"name": "top_k", "k": k, "budget": 120}, _pools(200))
    counts = Counter(r.source for r in out)
    assert len(out) == 120 and set(counts) == sources
    assert max(counts.values()) - min(counts.values()) <= 1  # even split
    assert len({r.uid for r in out}) == 120  # pools are large enough: no repeats


def test_top_k_plan_is_pure_and_remainder_goes_to_best():
    mix = DATA_MIX.build({"name": "top_k", "k": 3, "budget": 31600})
    assert mix.plan({"ok": 9, "best": 9, "good": 9, "bad": 9}, RANKS) == {"best": 10534, "good": 10533,
                                                                          "ok": 10533}
    assert share_metrics({"best": 3, "good": 1}) == {"data/mix_share/best": 0.75, "data/mix_share/good": 0.25}


def test_deterministic_per_seed_and_shuffled():
    spec = {"name": "top_k", "k": 2, "budget": 50}
    assert _mix(spec, seed=5) == _mix(spec, seed=5)
    assert _mix(spec, seed=5) != _mix(spec, seed=6)
    assert [r.source for r in _mix(spec)] != sorted(r.source for r in _mix(spec))


def test_small_pool_is_repeated_evenly():
    pools = {**_pools(), "best": _pools(7)["best"]}
    out = _mix({"name": "top_k", "k": 2, "budget": 40}, pools)
    counts = Counter(r.uid for r in out if r.source == "best")
    assert sum(counts.values()) == 20 and len(counts) == 7
    assert max(counts.values()) <= math.ceil(20 / 7)


def test_top_k_errors():
    with pytest.raises(ValueError, match="k=5"):
        _mix({"name": "top_k", "k": 5})
    with pytest.raises(ValueError, match="quality_rank"):
        DATA_MIX.build({"name": "top_k"})({"x": []}, {}, 0)
    with pytest.raises(ValueError, match="'best' has no records"):
        _mix({"name": "top_k"}, {**_pools(), "best": []})
    with pytest.raises(ConfigError, match="budget"):
        DATA_MIX.build({"name": "top_k", "budget": 0})


def test_weights_for_unlabelled_files_say_to_label_them():
    with pytest.raises(ValueError, match=r"unknown sources \['sft'\]; configured: \['file', 'file#1'\] "
                                         r"\(a file source is named by its label"):
        DATA_MIX.build({"name": "weighted", "weights": {"sft": 1.0}}).plan({"file": 3, "file#1": 3}, {})


def test_top_k_refuses_to_cut_between_sources_of_equal_rank():
    """File sources default to quality_rank 1: an unranked Top1 of two files took the one whose name sorts
    first, and the table compared a meaningless arm."""
    mix = DATA_MIX.build({"name": "top_k", "k": 1, "budget": 10})
    with pytest.raises(ValueError, match=r"k=1 would keep some and drop others of the sources tied at "
                                         r"quality_rank 1 \(src_a, src_b\)"):
        mix.plan({"src_b": 5, "src_a": 5, "other": 5}, {"src_a": 1, "src_b": 1, "other": 2})
    assert mix.plan({"src_a": 5, "other": 5}, {"src_a": 1, "other": 1 + 1}) == {"src_a": 10}
    both = DATA_MIX.build({"name": "top_k", "k": 2, "budget": 10})  # the cut falls after the tie: no choice made
    assert both.plan({"src_b": 5, "src_a": 5, "other": 5}, {"src_a": 1, "src_b": 1, "other": 2}) == {
        "src_a": 5, "src_b": 5}


def test_weighted_ratios():
    out = _mix({"name": "weighted", "weights": {"best": 3, "bad": 1}, "budget": 100})
    assert Counter(r.source for r in out) == {"best": 75, "bad": 25}
    mix = DATA_MIX.build({"name": "weighted", "weights": {"best": 1, "good": 1, "ok": 1}, "budget": 100})
    counts = mix.plan(dict.fromkeys(RANKS, 10), RANKS)
    assert sum(counts.values()) == 100 and sorted(counts.values()) == [33, 33, 34]
    assert Counter(r.source for r in _mix({"name": "weighted", "budget": 8})) == dict.fromkeys(RANKS, 2)


def test_weighted_errors():
    with pytest.raises(ValueError, match=r"\['nope', 'zzz'\]"):
        _mix({"name": "weighted", "weights": {"best": 1, "nope": 1, "zzz": 2}})
    with pytest.raises(ConfigError, match="weights"):
        DATA_MIX.build({"name": "weighted", "weights": {"best": -1}})


def test_record_stats_describe_the_records_given():
    from klear_lab.builders import record_stats

    recs = [Record(f"a/{i}", "a", "math", "p", "1", response_correct=i != 0) for i in range(3)]
    recs.append(Record("b/0", "b", "math", "p", "1"))  # correctness unknown: not counted either way
    stats = record_stats(recs)
    assert stats == {"data/mix_share/a": 0.75, "data/mix_share/b": 0.25, "data/records": 4.0,
                     "data/correct_frac": 2 / 3, "data/correct_known_frac": 0.75}
    assert record_stats(recs[1:3]) == {"data/mix_share/a": 1.0, "data/records": 2.0, "data/correct_frac": 1.0,
                                       "data/correct_known_frac": 1.0}
    assert record_stats(recs[3:]) == {"data/mix_share/b": 1.0, "data/records": 1.0, "data/correct_known_frac": 0.0}


def test_sources_that_produce_nothing_are_named(tmp_path):
    from pathlib import Path

    from klear_lab.builders import build_train_records
    from klear_lab.config.compose import compose
    from klear_lab.errors import DataError

    root = Path(__file__).resolve().parents[3]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    cfg = compose(root / "experiments/quickstart/sft.yaml", [f"data.sources=[{{name: file, path: {empty}}}]"])
    with pytest.raises(DataError, match=r"data.sources produced no training records \(file: 0\); read .*empty.jsonl"):
        build_train_records(cfg)
    cfg["data"]["sources"] = []  # compose refuses this; a config built by hand reaches the reader
    with pytest.raises(DataError, match=r"no training records \(it lists no source\)$"):
        build_train_records(cfg)
    beside = compose(root / "experiments/quickstart/sft.yaml",  # an empty file beside a full source: not silent
                     [f"data.sources=[{{name: arith_r1, n_prompts: 50}}, {{name: file, path: {empty}}}]"])
    with pytest.raises(DataError, match=r"data.sources.1 \(.*empty.jsonl\): no train records"):
        build_train_records(beside)


def test_two_files_of_one_name_are_refused_unless_labelled(tmp_path):
    """aime24/test.jsonl and aime25/test.jsonl both named their records 'test': one val/test/acc for two
    benchmarks, and row n of each drew the same sampling seed."""
    import json
    from pathlib import Path

    from klear_lab.builders import build_eval_records
    from klear_lab.config.compose import compose
    from klear_lab.errors import DataError

    root = Path(__file__).resolve().parents[3]
    paths = []
    for bench in ("aime24", "aime25"):
        (tmp_path / bench).mkdir()
        paths.append(tmp_path / bench / "test.jsonl")
        paths[-1].write_text(json.dumps({"prompt": f"{bench}: 2+3?", "answer": "5"}) + "\n")
    two = "data.eval_sources=[{{name: file, path: {}{}}}, {{name: file, path: {}{}}}]"
    cfg = compose(root / "experiments/quickstart/rl.yaml", [two.format(paths[0], "", paths[1], "")])
    with pytest.raises(DataError, match=r"data.eval_sources.0 \(.*aime24/test.jsonl\) and data.eval_sources.1 "
                                        r"\(.*aime25/test.jsonl\) both name their records 'test'.*give each file "
                                        r"source its own label \(`label: aime24` on data.eval_sources.0, `label: "
                                        r"aime25` on data.eval_sources.1\)"):
        build_eval_records(cfg)
    labelled = compose(root / "experiments/quickstart/rl.yaml",
                       [two.format(paths[0], ", label: aime24", paths[1], ", label: aime25")])
    assert [r.source for r in build_eval_records(labelled)] == ["aime24", "aime25"]
    # rows of their own uids, or one data_source in two differently named files: merged all the same
    for bench, path in zip(("aime24", "aime25"), paths, strict=True):
        path.write_text(json.dumps({"prompt": f"{bench}: 2+3?", "answer": "5", "uid": bench, "source": "aime"}) + "\n")
    with pytest.raises(DataError, match="both name their records 'aime'"):
        build_eval_records(cfg)
    alike = compose(root / "experiments/quickstart/rl.yaml",  # labelled alike on purpose: one benchmark
                    [two.format(paths[0], ", label: aime", paths[1], ", label: aime")])
    assert [r.source for r in build_eval_records(alike)] == ["aime", "aime"]
    levels = compose(root / "experiments/quickstart/rl.yaml", [  # world sources may repeat, as before
        "data.eval_sources=[{name: arith, n_prompts: 4, levels: [1], level_weights: [1.0]},"
        " {name: arith, n_prompts: 4, levels: [2], level_weights: [1.0]}]"])
    assert len(build_eval_records(levels)) == 8


def test_top_k_refuses_a_source_the_filter_emptied():
    """It quietly trained on the second-best source: K=1 of an emptied best source must fail, naming it."""
    from pathlib import Path

    from klear_lab.builders import build_train_records
    from klear_lab.config.compose import compose

    root = Path(__file__).resolve().parents[3]
    sources = ("data.sources=[{name: arith_r1, n_prompts: 50, levels: [1], level_weights: [1.0], quality_rank: 1}, "
               "{name: arith, n_prompts: 50, levels: [2], level_weights: [1.0], quality_rank: 2}]")
    banded = [sources, "data.filter={name: band, min_level: 2}"]
    cfg = compose(root / "experiments/quickstart/sft.yaml", [*banded, "data.mix={name: top_k, k: 1, budget: 40}"])
    with pytest.raises(ConfigError, match=r"data.mix 'top_k': source 'arith_r1' has no records \(after data.filter\)"):
        build_train_records(cfg)
    cfg = compose(root / "experiments/quickstart/sft.yaml", [*banded, "data.mix={name: all}"])
    records, stats = build_train_records(cfg)  # `all` takes what is left, and the emptied source is logged
    assert {r.source for r in records} == {"arith"} and stats["data/kept_frac/arith_r1"] == 0.0


def test_a_source_repeated_to_fill_its_share_is_logged_and_warned(tmp_path):
    """A budget larger than a filtered pool is met by repeating it, silently: two arms of one budget then
    differ in how often each example is seen."""
    import json
    from pathlib import Path

    from klear_lab.builders import build_train_records
    from klear_lab.config.compose import compose

    path = tmp_path / "small.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"p{i}", "answer": "1", "response": "r"}) + "\n" for i in range(3)))
    exp = Path(__file__).resolve().parents[3] / "experiments/quickstart/sft.yaml"
    cfg = compose(exp, [f"data.sources=[{{name: file, path: {path}, format: records}}]",
                        "data.mix={name: top_k, k: 0, budget: 7}"])
    with pytest.warns(UserWarning, match=r"source 'file' has 3 records after data.filter for a share of 7"):
        records, stats = build_train_records(cfg)
    assert len(records) == 7 and stats["data/repeat_factor/file"] == pytest.approx(7 / 3)
    cfg = compose(exp, [f"data.sources=[{{name: file, path: {path}, format: records}}]",
                        "data.mix={name: top_k, k: 0, budget: 3}"])
    assert build_train_records(cfg)[1]["data/repeat_factor/file"] == 1.0
    cfg = compose(exp, [f"data.sources=[{{name: file, path: {path}, format: records, label: mine}}]"])
    assert "data/kept_frac/mine" in build_train_records(cfg)[1]  # a label names the source's stats too


def test_a_label_taken_by_an_earlier_source_is_refused(tmp_path):
    """Labels math#2, math, math: the third source's pool took the label "math#2" and replaced the first's,
    whose records were gone without a word (found by a review)."""
    import json
    from pathlib import Path

    from klear_lab.builders import build_train_records
    from klear_lab.config.compose import compose
    from klear_lab.errors import DataError

    nodes = []
    for name, label in (("a", "math#2"), ("b", "math"), ("c", "math")):
        path = tmp_path / f"{name}.jsonl"
        path.write_text(json.dumps({"prompt": f"{name}: 2+3?", "answer": "5", "response": "5"}) + "\n")
        nodes.append(f"{{name: file, path: {path}, label: '{label}'}}")
    cfg = compose(Path(__file__).resolve().parents[3] / "experiments/quickstart/sft.yaml",
                  [f"data.sources=[{', '.join(nodes)}]"])
    with pytest.raises(DataError, match=r"data.sources.2: source label 'math#2' is already taken by data.sources.0"):
        build_train_records(cfg)


PLUGIN_MIX = '''
from dataclasses import dataclass
from klear_lab.registry import DATA_MIX


@DATA_MIX.register("{name}")
@dataclass(frozen=True)
class Bad:
    def __call__(self, pools, ranks, seed):
        return {body}
'''


@pytest.mark.parametrize(("body", "said"), [
    ("dict(pools)", r"returned dict \(\{'arith_r1': \[Record"),
    ("len(pools)", r"returned int \(\d+\)"),
    ("[r.prompt for p in pools.values() for r in p]", r"returned a str \('.*'\) among its records"),
    ("[]", r"drew no record from pools of \d+ records \(arith_"),
])
def test_a_mix_plugin_that_returns_no_list_of_records_is_named(tmp_path, capsys, registries_restored, body, said):
    """A mix that returned its pools or a count failed in the data stats with a traceback naming nothing (exit
    1); one that drew nothing was reported as data without teacher responses."""
    from klear_lab.cli import main

    name = f"bad_mix_{abs(hash(body)) % 10_000}"
    plugin = tmp_path / f"{name}.py"
    plugin.write_text(PLUGIN_MIX.format(name=name, body=body))
    experiment = Path(__file__).resolve().parents[3] / "experiments/quickstart/sft.yaml"
    assert main(["train", str(experiment), f"plugins=[{plugin}]", f"data.mix={name}",
                 f"run.out_dir={tmp_path / 'runs'}"]) == 2
    err = capsys.readouterr().err
    assert re.search(rf"data\.mix '{name}' \({re.escape(str(plugin))}:\d+\) {said}", err), err
    assert "a data mix returns the list of Records it draws" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
