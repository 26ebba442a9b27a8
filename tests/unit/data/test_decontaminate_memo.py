"""Decontamination is paid once per process: a pool of the same distinct prompts, against the same held-out
prompts at the same ``n``, is not compared again (``records_digests`` builds a resumed run's records, then the
run builds them again), and what is remembered is exact: any other prompt, held-out prompt or ``n`` is compared."""

from __future__ import annotations

import pytest
from test_decontam_run import TRAIN, sft_config

from klear_lab import builders
from klear_lab.data import decontaminate
from klear_lab.data.decontaminate import decontaminated_pools
from klear_lab.data.records import Record

HELD = ["Let a, b and c be positive reals with abc = 1. Find the least value of a^2 + b^2 + c^2.",
        "A frog jumps along the number line from 0, one unit left or right at random on every jump."]
COPY = "Consider a, b and c be positive reals with abc = 1. Find the greatest value of a."


def rec(uid: str, prompt: str, response: str = "r") -> Record:
    return Record(uid=uid, source="s", task="math", prompt=prompt, answer="1", response=response)


def pools(response: str = "r") -> dict[str, list[Record]]:
    """Fresh records each call (as a second read of the files gives): a copy of a held-out problem twice."""
    return {"mine": [rec("m0", COPY, response), rec("m1", "Name a prime.", response), rec("m2", COPY, response)],
            "other": [rec("o0", "Name two primes.", response)]}


def held() -> list[Record]:
    return [rec(f"h{i}", p) for i, p in enumerate(HELD)]


@pytest.fixture
def comparisons(monkeypatch) -> list[int]:
    """The distinct prompts compared with a held-out index, per comparison; nothing remembered before."""
    monkeypatch.setattr(decontaminate, "_matched", type(decontaminate._matched)())
    calls: list[int] = []
    compare = decontaminate.matched_flags
    monkeypatch.setattr(decontaminate, "matched_flags", lambda prompts, index: calls.append(len(prompts))
                        or compare(prompts, index))
    return calls


def test_the_same_pools_again_are_not_compared_again_and_give_equal_records(comparisons):
    first = decontaminated_pools(pools(), held(), 9, quiet=True)
    assert comparisons == [2, 1]  # each pool's distinct prompts, once
    assert [r.uid for r in first[0]["mine"]] == ["m1"] and first[1]["data/decontam_dropped"] == 2.0
    again = decontaminated_pools(pools(), held(), 9, quiet=True)
    assert again == first and comparisons == [2, 1]


def test_the_records_come_from_the_call_not_from_what_was_remembered(comparisons):
    decontaminated_pools(pools("r"), held(), 9, quiet=True)
    kept, _ = decontaminated_pools(pools("another response"), held(), 9, quiet=True)
    assert [r.response for r in kept["other"]] == ["another response"] and len(comparisons) == 2
    kept["mine"].clear()  # a caller emptying its list changes no later call's
    assert [r.uid for r in decontaminated_pools(pools(), held(), 9, quiet=True)[0]["mine"]] == ["m1"]


def test_a_refusal_and_the_line_are_made_again_from_remembered_matches(comparisons, capsys):
    from klear_lab.errors import DataError

    all_copies = {"mine": [rec("m0", COPY), rec("m1", COPY)]}
    for _ in range(2):
        with pytest.raises(DataError, match="all 2 training records of source 'mine'"):
            decontaminated_pools(all_copies, held(), 9)
    assert comparisons == [1]
    decontaminated_pools(pools(), held(), 9, quiet=True)
    decontaminated_pools(pools(), held(), 9)
    assert "dropped 2 of 4 training records" in capsys.readouterr().err and comparisons == [1, 2, 1]


@pytest.mark.parametrize("change", ["a training prompt", "a held-out prompt", "n"])
def test_any_other_prompt_or_n_is_compared(comparisons, change):
    decontaminated_pools(pools(), held(), 9, quiet=True)
    train, heldout, n = pools(), held(), 9
    if change == "a training prompt":
        train["other"] = [rec("o0", "Name three primes.")]
    elif change == "a held-out prompt":
        heldout[1] = rec("h1", HELD[1] + " Where does it stop?")
    else:
        n = 8
    decontaminated_pools(train, heldout, n, quiet=True)
    assert comparisons == [2, 1] + ([1] if change == "a training prompt" else [2, 1])


def test_what_is_remembered_is_bounded(comparisons, monkeypatch):
    monkeypatch.setattr(decontaminate, "MEMO_SIZE", 2)
    for k in range(3):  # the first pool is forgotten when the third is remembered
        decontaminated_pools({"p": [rec("p", f"Name {k} primes.")]}, held(), 9, quiet=True)
    decontaminated_pools({"p": [rec("p", "Name 2 primes.")]}, held(), 9, quiet=True)
    assert len(comparisons) == 3 and len(decontaminate._matched) == 2
    decontaminated_pools({"p": [rec("p", "Name 0 primes.")]}, held(), 9, quiet=True)
    assert len(comparisons) == 4


def test_a_memo_of_size_zero_remembers_nothing(comparisons, monkeypatch):
    monkeypatch.setattr(decontaminate, "MEMO_SIZE", 0)
    for _ in range(2):
        kept, _ = decontaminated_pools({"p": [rec("p", "Name 1 primes.")]}, held(), 9, quiet=True)
        assert [r.prompt for r in kept["p"]] == ["Name 1 primes."]
    assert len(comparisons) == 2 and not decontaminate._matched


def test_building_a_runs_records_twice_compares_them_once(tmp_path, comparisons, capsys):
    """``records_digests``' quiet build, then the run's: equal records, the line printed by the run's."""
    cfg = sft_config(tmp_path, 9, TRAIN)
    checked = builders.build_run_records(cfg, quiet=True)
    assert comparisons == [4] and "dropped" not in capsys.readouterr().err
    assert builders.build_run_records(cfg) == checked and comparisons == [4]
    assert "data.decontaminate_ngram=9: dropped 2 of 4" in capsys.readouterr().err
