"""N-gram decontamination on hand-made records: what counts as a shared run of words, and what is reported."""

from __future__ import annotations

import pytest

from klear_lab.data.decontaminate import decontaminated_pools, heldout_index, prompt_words
from klear_lab.data.records import Record
from klear_lab.errors import ConfigError, DataError

HELD = "Let a, b and c be positive reals with abc = 1. Find the least value of a^2 + b^2 + c^2 over all such triples."
TEMPLATE = "You are an expert Python programmer. You will be given a question and will write a correct program.\n\n"
PROBLEMS = ["Takahashi has N apples and eats one of them on every day of the week.",
            "Aoki builds a tower of N blocks and paints each block red or blue in turn.",
            "You are given a string S of lowercase letters; print how many distinct letters it holds.",
            "Given an integer array of length N, print the sum of its even entries only."]


def rec(uid: str, prompt: str, source: str = "s") -> Record:
    return Record(uid, source, "math", prompt, "1")


def kept_uids(train: list[Record], held: list[Record], n: int = 9) -> list[str]:
    pools, _ = decontaminated_pools({"s": train}, held, n)
    return [r.uid for r in pools["s"]]


def test_one_shared_run_of_nine_words_drops_a_prompt_and_eight_do_not():
    held = [rec("e/0", HELD, "aime")]
    nine = rec("t/nine", "Consider where c be positive reals with abc = 1, find the answer quickly please.")
    eight = rec("t/eight", "Consider where c be positive reals with abc = 1, so nothing else here today.")
    clean = rec("t/clean", "Let a be a prime.")
    assert kept_uids([nine, eight, clean], held) == ["t/eight", "t/clean"]
    assert kept_uids([nine, eight, clean], held, n=8) == ["t/clean"]  # eight words are a run of 8


def test_words_are_lowercased_letters_and_digits_and_operators_whatever_separates_them():
    assert prompt_words("What  is\n$X^2$?") == ("what", "is", "x", "^", "2")
    assert prompt_words("snake_case 3.14 Ünï") == ("snake", "case", "3", "14", "ünï")
    assert prompt_words("$$ ?? {}.") == ()
    assert prompt_words("Compute 71-43+14.") != prompt_words("Compute 71+43+14.")  # two problems, not one
    held = [rec("e/0", HELD, "aime")]
    recased = rec("t/0", "LET A,B AND C BE POSITIVE REALS WITH ABC=1; find THE least value!")  # markup and case only
    assert kept_uids([recased, rec("t/1", "Let a be a prime.")], held) == ["t/1"]


def test_a_short_prompt_is_dropped_only_as_an_exact_duplicate():
    """``Find x.`` or ``Simplify sqrt(242).`` open many other problems: looked for inside them, they dropped
    problems that are not theirs."""
    held = [rec("e/0", "What is 2 + 3?", "arith"), rec("e/1", "???", "arith"), rec("e/2", "Find x.", "geo"),
            rec("e/3", "Simplify $\\sqrt{242}$.", "alg")]
    train = [rec("t/dup", "what is 2+3"), rec("t/quoted", "Tell me: what is 2 + 3? Then add one more to it, please."),
             rec("t/no_words", "???"), rec("t/other", "What is 2 + 4?"),
             rec("t/find", "In triangle ABC the angle A is 30 degrees; find x, the length of BC, given AB = 4."),
             rec("t/more", "Simplify $\\sqrt{242}\\cdot\\sqrt{8}$ and give an integer.")]
    assert kept_uids(train, held) == ["t/quoted", "t/no_words", "t/other", "t/find", "t/more"]


def test_unicode_operators_read_as_their_ascii_spelling():
    held = [rec("e/0", "Solve −3x − 7 ≤ 2x − 12 − x and x − 1 ≥ −5 − x for real x, giving every solution.", "alg")]
    typed = rec("t/0", "Solve -3x - 7 <= 2x - 12 - x and x - 1 >= -5 - x for real x, giving every solution.")
    assert kept_uids([typed, rec("t/1", "Name a prime.")], held) == ["t/1"]


def test_a_stock_phrase_spread_over_two_benchmarks_is_boilerplate():
    tail = "can be written as m/n, where m and n are relatively prime positive integers. Find m+n."
    held = [rec(f"e/{src}{i}", f"{p} {tail}", src) for src, ps in
            (("aime24", PROBLEMS[:2]), ("aime25", PROBLEMS[2:])) for i, p in enumerate(ps)]
    train = rec("t/0", f"Two dice are rolled and the chance that their sum is prime {tail}")
    assert kept_uids([train], held) == ["t/0"]


def test_arithmetic_problems_that_differ_in_an_operator_are_different_problems():
    """The embedded world keeps training and held-out problems apart; without operators as words,
    'Compute 71+43+14.' was dropped as a copy of the held-out 'Compute 71-43+14.'."""
    held = [rec("e/0", "Compute 71-43+14.", "arith"), rec("e/1", "Compute 76+73-50.", "arith")]
    train = [rec("t/0", "Compute 71+43+14."), rec("t/1", "Compute 76+73+50."), rec("t/2", "Compute 71-43+14.")]
    assert kept_uids(train, held) == ["t/0", "t/1"]


def test_a_held_out_sources_prompt_template_is_not_matched():
    """Every code prompt of the paper's RL data opens with one instruction, its training files' and
    LiveCodeBench's alike: matching it would drop every code training record."""
    held = [rec(f"e/{i}", TEMPLATE + p, "lcb") for i, p in enumerate(PROBLEMS)]
    train = [rec("t/other", TEMPLATE + "Snuke counts the stones in N piles and prints the largest pile."),
             rec("t/same_start", TEMPLATE + "You are given two integers A and B; print their product now."),
             rec("t/problem", TEMPLATE + "Aoki builds a tower of N blocks and paints each block green.")]
    assert kept_uids(train, held) == ["t/other", "t/same_start"]  # the run from the template into "you" too


def test_boilerplate_is_found_in_three_distinct_held_out_prompts_copies_counting_once():
    held = [rec(f"e/{i}.{copy}", TEMPLATE + p, "lcb") for i, p in enumerate(PROBLEMS[:2]) for copy in range(4)]
    train = [rec("t/0", TEMPLATE + "Snuke counts the stones in N piles."), rec("t/1", TEMPLATE + "Print N.")]
    with pytest.raises(DataError, match=r"data.decontaminate_ngram=9: all 2 training records of source 's' share "
                                        r"a 9-word run .* \(the first: 't/0'\); is it the held-out file itself"):
        kept_uids(train, held)


def test_the_counts_go_into_the_data_stats_and_one_line_names_the_first(capsys):
    held = [rec("e/0", HELD, "aime")]
    copy = "Let a, b and c be positive reals with abc = 1. Find the least value of a + b + c."
    pools = {"a": [rec("a/0", "Name a prime."), rec("a/1", copy), rec("a/2", copy)],
             "b": [rec("b/0", HELD), rec("b/1", "Name two primes.")], "c": [rec("c/0", "Name an odd number.")]}
    kept, stats = decontaminated_pools(pools, held, 9)
    assert {name: [r.uid for r in recs] for name, recs in kept.items()} == {"a": ["a/0"], "b": ["b/1"], "c": ["c/0"]}
    assert stats == {"data/decontam_dropped": 3.0, "data/decontam_dropped_from/a": 2.0,
                     "data/decontam_dropped_from/b": 1.0, "data/decontam_dropped_from/c": 0.0}
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "data.decontaminate_ngram=9: dropped 3 of 6 training records" in err
    assert "(a: 2, b: 1; the first: 'a/1' of 's')" in err


def test_dropping_every_record_of_one_source_is_refused_and_a_negative_n_too():
    held = [rec("e/0", HELD, "aime")]
    with pytest.raises(DataError, match=r"all 1 training records of source 'b'"):
        decontaminated_pools({"a": [rec("a/0", "Name a prime.")], "b": [rec("b/0", HELD)]}, held, 9)
    with pytest.raises(ConfigError, match=r"data.decontaminate_ngram must be 0 \(off\) or a word count"):
        decontaminated_pools({"a": [rec("a/0", "Name a prime.")]}, held, -1)


def test_the_index_keeps_each_held_out_run_once():
    index = heldout_index([rec("e/0", HELD, "aime"), rec("e/1", HELD, "aime")], 9)
    assert len(index.ngrams) == len(prompt_words(HELD)) - 8 and not index.starts  # its runs: looked for whole too


def test_a_minority_format_of_a_held_out_source_is_boilerplate_too():
    """LiveCodeBench mixes AtCoder prompts (read stdin) and LeetCode ones (starter code): the format of the
    fewer was taken for a problem's text, and every training problem in that format was dropped."""
    stdin = "Read the input from standard input and write the answer to standard output as the judge expects."
    starter = "You will use the following starter code to write the solution to the problem and enclose it."
    held = [rec(f"e/s{i}", f"{p} {stdin}", "lcb") for i, p in enumerate(PROBLEMS)]
    held += [rec(f"e/c{i}", f"{p} {starter}", "lcb") for i, p in enumerate(["Reverse a linked list in place.",
             "Merge two sorted arrays into one.", "Count the islands of a grid of ones."])]
    train = [rec("t/0", f"Find the longest palindrome in a string. {starter}"),
             rec("t/1", f"Sum the leaves of a binary tree. {starter}"),
             rec("t/2", f"Count the islands of a grid of ones. {starter}")]  # a held-out problem, whole
    assert kept_uids(train, held) == ["t/0", "t/1"]


def test_a_held_out_problem_of_boilerplate_only_is_still_caught_quoted_whole():
    """Held-out variants that differ only in their numbers made the whole problem boilerplate: a verbatim copy
    inside a longer training prompt went through."""
    held = [rec(f"e/{k}", f"A train leaves the station at {k} km per hour and another follows it; when do they "
                          "meet on the long straight track?", "aime") for k in (40, 50, 60, 70)]
    quoted = rec("t/0", f"Solve this: {held[1].prompt} Explain every step.")
    assert kept_uids([quoted, rec("t/1", "Name a prime.")], held) == ["t/1"]
