"""Records a reward grades need something to grade against, checked before anything trains."""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

from klear_lab.data.records import Record, require_gradeable
from klear_lab.errors import DataError

ROOT = Path(__file__).resolve().parents[3]


def test_blank_math_answer_and_testless_code_are_refused():
    code = Record("c/0", "s", "code", "p", "", tests=({"stdin": "", "stdout": ""},))
    good = [Record("m/0", "s", "math", "p", "5"), code]
    require_gradeable(good, "data.sources")
    with pytest.raises(DataError, match=r"data.sources: 1 of 3 records cannot be graded; the first, 'm/1' of source "
                                        r"'s' \(math\), has no reference answer \(missing, null or blank\)"):
        require_gradeable([*good, Record("m/1", "s", "math", "p", "  ")], "data.sources")
    with pytest.raises(DataError, match=r"2 of 4 .* 'c/1' of source 'lcb' \(code\), has no tests"):
        require_gradeable([*good, Record("c/1", "lcb", "code", "p", "x"), Record("m/2", "s", "math", "p", "")],
                          "data.eval_sources")


def test_a_verl_functional_spec_is_refused_when_eval_records_are_built(tmp_path):
    """A verl 'functional' spec loads with no stdin tests; it failed only when scored, mid-run."""
    from klear_lab.builders import build_eval_records
    from klear_lab.config.compose import compose

    row = {"data_source": "lcb", "ability": "code", "prompt": [{"role": "user", "content": "Write f."}],
           "reward_model": {"ground_truth": json.dumps({"functional": "assert f(1) == 2"}), "style": "rule"}}
    path = tmp_path / "eval.jsonl"
    path.write_text(json.dumps(row) + "\n")
    cfg = compose(ROOT / "experiments/quickstart/code_rl.yaml", [f"data.eval_sources=[{{name: file, path: {path}}}]"])
    with pytest.raises(DataError, match=r"data.eval_sources: 1 of 1 records cannot be graded; the first, 'eval/1' "
                                        r"of source 'lcb'.*"
                                        r"'functional'/'pytest' specs are not supported"):
        build_eval_records(cfg)


def test_a_file_eval_source_reads_its_path_and_an_empty_one_is_refused(tmp_path):
    """The paper configs name AIME24 as ``{name: file, path: ...}`` in data.eval_sources: it gave no records."""
    from klear_lab.builders import build_eval_records
    from klear_lab.config.compose import compose

    row = {"data_source": "aime24", "ability": "math", "prompt": [{"role": "user", "content": "2+3?"}],
           "reward_model": {"ground_truth": "5", "style": "rule"}}
    path = tmp_path / "aime.jsonl"
    path.write_text(json.dumps(row) + "\n")
    cfg = compose(ROOT / "experiments/quickstart/rl.yaml", [f"data.eval_sources=[{{name: file, path: {path}}}]"])
    assert [(r.source, r.answer) for r in build_eval_records(cfg)] == [("aime24", "5")]
    (tmp_path / "empty.jsonl").write_text("")
    empty = tmp_path / "empty.jsonl"
    cfg = compose(ROOT / "experiments/quickstart/rl.yaml",
                  [f"data.eval_sources=[{{name: file, path: {path}}}, {{name: file, path: {empty}}}]"])
    with pytest.raises(DataError, match=r"data.eval_sources.1 \(.*empty.jsonl\): no eval records"):
        build_eval_records(cfg)


def test_a_plain_records_row_without_tests_gets_the_records_layout_hint(tmp_path):
    """A JSONL records-layout code row with ``"tests": []`` was told what a verl spec needs, though the file
    has no verl spec; a verl row keeps the verl hint."""
    from klear_lab.data.sources.file import FileSource

    path = tmp_path / "code.jsonl"
    path.write_text(json.dumps({"uid": "c1", "task": "code", "prompt": "Write f.", "answer": "", "tests": []}) + "\n")
    records = FileSource(path=str(path)).records(0, "train")
    with pytest.raises(DataError, match=r"'c1' of source 'code' \(code\), read from .*code\.jsonl: row 1, has no "
                                        r"tests \(a code record needs a "
                                        r"non-empty 'tests' list: .*\"input\".*\"stdin\"") as caught:
        require_gradeable(records, "data.sources")
    assert "verl" not in str(caught.value)
    verl = tmp_path / "verl.jsonl"
    verl.write_text(json.dumps({"data_source": "lcb", "ability": "code", "prompt": "Write f.",
                                "reward_model": {"ground_truth": json.dumps({"functional": "assert f(1)"})}}) + "\n")
    with pytest.raises(DataError, match="a verl spec needs 'inputs'/'outputs' stdin tests"):
        require_gradeable(FileSource(path=str(verl)).records(0, "train"), "data.sources")
