"""K-Center Greedy selection of a mix's records (paper Tables 2, 4 and 5): ``select: kcenter``."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import zlib
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from klear_lab.data.mixes.kcenter import kcenter_order, kcenter_take, prompt_features
from klear_lab.data.records import Record
from klear_lab.errors import ConfigError
from klear_lab.registry import DATA_MIX

ROOT = Path(__file__).resolve().parents[3]


def _rec(uid: str, prompt: str, source: str = "s") -> Record:
    return Record(uid, source, "math", prompt, "1")


def _topics(sizes: list[int]) -> list[Record]:
    """Records of ``len(sizes)`` topics with disjoint vocabularies, topic t holding ``sizes[t]`` records."""
    rng = random.Random(0)
    out = []
    for topic, size in enumerate(sizes):
        vocab = [f"t{topic}w{j}" for j in range(30)]
        out += [_rec(f"s/{topic}/{i}", " ".join(rng.choices(vocab, k=12))) for i in range(size)]
    return out


def test_features_count_words_and_their_order_in_small_integers():
    x = prompt_features(["Add two numbers", "add TWO numbers", "numbers two add", ""], 4096)
    assert torch.equal(x[0], x[1])  # case does not matter
    assert x[0].abs().sum() == 5 and x[2].abs().sum() == 5  # 3 unigrams + 2 bigrams (no collisions at 4096)
    assert not torch.equal(x[0], x[2])  # same words, other bigrams
    assert x[3].abs().sum() == 0
    assert torch.equal(x, x.round())
    loud = prompt_features([" ".join(["the"] * 5000)], 1024)  # clipped so that dot products stay exact in float32
    assert loud.abs().max() == 128 and (loud.abs().max() ** 2 * 1024) <= 2**24


def test_features_are_signed_and_bigrams_mixed_apart_from_their_words():
    x = prompt_features([f"word{i} and more" for i in range(200)], 256)
    assert (x < 0).any() and (x > 0).any()
    buckets: dict[int, str] = {}  # two words in one unigram bucket, then each before the same word
    for i in range(10000):
        word = f"w{i}"
        if (b := zlib.crc32(word.encode()) % 256) in buckets:
            break
        buckets[b] = word
    pair = prompt_features([f"{buckets[b]} zz", f"{word} zz"], 256)
    assert not torch.equal(pair[0].abs(), pair[1].abs())  # their bigrams with "zz" fall apart


@pytest.mark.parametrize("dim", [256, 1024])
def test_dot_products_are_exact_in_float32(dim):
    rng = random.Random(0)
    prompts = [" ".join(["the"] * rng.randrange(1, 3000) + [f"w{rng.randrange(50)}" for _ in range(40)])
               for _ in range(300)]
    x = prompt_features(prompts, dim)
    assert torch.equal((x @ x.T).long(), x.long() @ x.long().T)


PINNED = ("import hashlib, random, torch\n"
          "from klear_lab.data.mixes.kcenter import kcenter_order, prompt_features\n"
          "r = random.Random(0)\n"
          "p = [' '.join(r.choices(['a', 'b', 'c', 'sum', 'of', 'x', 'y', '2', '3'], k=8)) for _ in range(400)]\n"
          "x = prompt_features(p, 64)\n"
          "print(hashlib.sha256(x.numpy().tobytes()).hexdigest(), kcenter_order(x, 40, 0))\n")


def test_same_features_and_order_in_every_process():
    """Python's ``hash()`` of a string differs per process (PYTHONHASHSEED): the features must not use it."""
    outs = [subprocess.run([sys.executable, "-c", PINNED], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("0", "123")]
    assert outs[0] == outs[1] and len(outs[0].split(" ", 1)[1]) > 40


def test_order_is_farthest_first_and_stops_at_repeats():
    # rows: [1,0], [0,1], [1,1], [2,0] (same direction as row 0), [0,0] (an empty prompt)
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 0.0], [0.0, 0.0]])
    # from row 0: cosines 0, 0.71, 1, (empty: 0) -> row 1 (lowest index of the two at 0); then the
    # empty row (0 to both); then row 2 (0.71); row 3 repeats row 0's direction: stop
    assert kcenter_order(x, 10, first=0) == [0, 1, 4, 2]
    assert kcenter_order(x, 2, first=2) == [2, 4]


def test_kcenter_covers_small_topics_that_random_misses():
    pool = _topics([900] + [10] * 9)
    topics = lambda recs: {r.uid.split("/")[1] for r in recs}  # noqa: E731
    spec = {"name": "top_k", "k": 1, "budget": 20}
    kcenter = DATA_MIX.build({**spec, "select": "kcenter"})({"s": pool}, {"s": 1}, 0)
    drawn = DATA_MIX.build(spec)({"s": pool}, {"s": 1}, 0)
    assert len(kcenter) == 20 and len({r.uid for r in kcenter}) == 20
    assert len(topics(kcenter)) == 10
    assert len(topics(drawn)) < 10


def test_repeated_prompts_are_one_point_then_the_rest_is_random():
    pool = [_rec(f"s/{p}/{k}", f"problem number {p} asks this") for p in range(5) for k in range(4)]
    out = kcenter_take(pool, 8, random.Random(0), 256)
    assert len({r.uid for r in out}) == 8
    assert {r.prompt for r in out[:5]} == {r.prompt for r in pool}  # every problem before any repeat
    assert out == kcenter_take(pool, 8, random.Random(0), 256)
    assert kcenter_take(pool, 8, random.Random(1), 256) != out


def test_same_choice_with_one_thread_or_two():
    pool = _topics([12000, 6000, 2000])
    before = torch.get_num_threads()
    try:
        picks = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            picks.append([r.uid for r in kcenter_take(pool, 150, random.Random(3), 64)])
    finally:
        torch.set_num_threads(before)
    assert picks[0] == picks[1]


def test_a_pool_smaller_than_its_share_is_repeated_whole_then_selected():
    pool = _topics([4, 4])
    out = DATA_MIX.build({"name": "weighted", "budget": 11, "select": "kcenter"})({"s": pool}, {}, 0)
    counts = sorted({r.uid: sum(o.uid == r.uid for o in out) for r in pool}.values())
    assert len(out) == 11 and counts == [1] * 5 + [2] * 3


@pytest.mark.parametrize("bad, match", [({"select": "kmeans"}, r"select must be one of \['random', 'kcenter'\]"),
                                        ({"kcenter_dim": 0}, r"kcenter_dim must be in \[1, 65536\]"),
                                        ({"kcenter_dim": 1 << 17}, "kcenter_dim must be in")])
def test_bad_selection_is_a_config_error(bad, match):
    for name in ("top_k", "weighted"):
        with pytest.raises(ConfigError, match=match):
            DATA_MIX.build({"name": name, **bad})


def test_config_selects_and_hashes_only_when_set():
    from klear_lab.builders import build_train_records
    from klear_lab.config.compose import compose
    from klear_lab.tracking import config_hash

    base = ROOT / "experiments/quickstart/sft.yaml"
    small = ["data.sources=[{name: arith_r1, n_prompts: 300}, {name: arith_qwq, n_prompts: 300}]",
             "data.mix={name: top_k, k: 0, budget: 100}"]
    plain, explicit = compose(base, small), compose(base, [*small, "data.mix.select=random"])
    chosen = compose(base, [*small, "data.mix.select=kcenter"])
    assert plain["data"]["mix"]["select"] == "random" and plain["data"]["mix"]["kcenter_dim"] == 256
    assert config_hash(plain) == config_hash(explicit) != config_hash(chosen)
    records, _ = build_train_records(chosen)
    assert len(records) == 100 and records == build_train_records(chosen)[0]
    assert {r.uid for r in records} != {r.uid for r in build_train_records(plain)[0]}
