"""``sweep --validate-only`` (and the sweep) refuse, for each arm, the data-mix and held-out-name mistakes its
config alone decides (``checks.trial_problem`` asks ``dry_run_data.data_problems``, as ``train --dry-run`` does):
it said OK, and each trial then stopped with exit 2. Held-out files the rows of which name their records alike
were refused already, by the up-front read (``data_checks.check_trial_data``)."""

from __future__ import annotations

import json

from sweep_fixtures import write_spec

from klear_lab.cli_sweep import main

GOOD = {"prompt": "1+1=", "answer": "2", "response": "2"}


def _jsonl(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(GOOD) + "\n")
    return path


def _two_files(tmp_path) -> str:
    a, b = _jsonl(tmp_path / "a/one.jsonl"), _jsonl(tmp_path / "b/two.jsonl")
    return f"data.sources=[{{name: file, path: {a}}}, {{name: file, path: {b}}}]"


def test_a_top_k_arm_that_cuts_sources_of_one_rank_is_refused_naming_the_axis(tmp_path, capsys):
    ranked = _two_files(tmp_path).replace("two.jsonl}]", "two.jsonl, quality_rank: 2}]")
    spec = write_spec(tmp_path, overrides=[ranked, "data.mix={name: top_k, k: 1, budget: 4}"],
                      axes={"data.sources.1.quality_rank": [2, 1]})
    assert main(["sweep", str(spec), "--validate-only"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{spec}: axes.data.sources.1.quality_rank: value 1: " in err, err
    assert "data.mix 'top_k': k=1 would keep some and drop others of the sources tied at quality_rank 1" in err
    assert f"file is data.sources.0 ({tmp_path}/a/one.jsonl)" in err


def test_weights_naming_no_source_stop_every_trial_as_the_base_s(tmp_path, capsys):
    spec = write_spec(tmp_path, overrides=[_two_files(tmp_path), "data.mix={name: weighted, weights: {a: 1}}"])
    assert main(["sweep", str(spec), "--validate-only"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (f"{spec}: base experiment: every trial would stop before training: data.mix 'weighted': weights name "
            "unknown sources ['a']") in err, err
    assert not (tmp_path / "out" / "toy" / "study.db").exists()


def test_distinct_ranks_and_valid_weights_validate(tmp_path, capsys):
    sources = _two_files(tmp_path).replace("two.jsonl}]", "two.jsonl, quality_rank: 2}]")
    for mix in ("{name: top_k, k: 1, budget: 4}", "{name: weighted, weights: {'file#1': 1}, budget: 4}"):
        spec = write_spec(tmp_path, overrides=[sources, f"data.mix={mix}"])
        assert main(["sweep", str(spec), "--validate-only"]) == 0, capsys.readouterr().err


def test_heldout_files_whose_records_share_a_name_were_refused_by_the_read(tmp_path, capsys):
    a, b = _jsonl(tmp_path / "aime24/test.jsonl"), _jsonl(tmp_path / "aime25/test.jsonl")
    spec = write_spec(tmp_path, overrides=[f"data.eval_sources=[{{name: file, path: {a}}}, {{name: file, path: {b}}}]"])
    assert main(["sweep", str(spec), "--validate-only"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"data.eval_sources.0 ({a}) and data.eval_sources.1 ({b}) both name their records 'test'" in err, err


def test_one_heldout_file_read_twice_unlabelled_is_refused_even_where_it_is_not_here(tmp_path, capsys):
    """The read leaves a file this machine lacks to the note; that two entries read it alike is certain anyway."""
    gone = tmp_path / "elsewhere/test.jsonl"
    spec = write_spec(tmp_path, overrides=[f"data.eval_sources=[{{name: file, path: {gone}}}, "
                                           f"{{name: file, path: {gone}, limit: 5}}]"])
    assert main(["sweep", str(spec), "--validate-only"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"data.eval_sources.0 ({gone}) and data.eval_sources.1 ({gone}) read one file without a label" in err, err
