"""SFT trains on teacher responses: records without one are counted, and data without any is refused."""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

from klear_lab.data.records import Record
from klear_lab.errors import DataError
from klear_lab.stages.sft import check_responses

ROOT = Path(__file__).resolve().parents[3]


def test_records_without_a_response_are_counted_and_warned():
    recs = [Record("a/0", "a", "math", "p", "1", response="<think>x</think> 1"), Record("a/1", "a", "math", "p", "1")]
    with pytest.warns(UserWarning, match=r"1 of 2 training records have no teacher response \(a blank one counts "
                                         r"as none\) and are skipped \(the first: 'a/1' of source 'a'\)"):
        assert check_responses(recs) == 1
    assert check_responses(recs[:1]) == 0


def test_a_verl_rl_file_as_sft_data_is_refused_before_a_model_is_built(tmp_path):
    """It ended in "no SFT example fits data.max_length (dropped 0 longer ones)", which named the wrong cause."""
    from klear_lab.config.compose import compose
    from klear_lab.stages.sft import prepare_sft

    row = {"data_source": "math", "prompt": [{"role": "user", "content": "2+3?"}],
           "reward_model": {"ground_truth": "5", "style": "rule"}}
    path = tmp_path / "rl.jsonl"
    path.write_text(json.dumps(row) + "\n")
    cfg = compose(ROOT / "experiments/quickstart/sft.yaml", [f"data.sources=[{{name: file, path: {path}}}]"])
    with pytest.raises(DataError, match="none of the 1 training records has a teacher response"):
        prepare_sft(cfg)


def test_a_blank_response_counts_as_none(tmp_path):
    """A 'response' column emptied by a bad export trained on end-of-sequence tokens alone, without a word."""
    from klear_lab.config.compose import compose
    from klear_lab.stages.sft import prepare_sft

    rows = [{"prompt": f"What is {i}+1?", "answer": str(i + 1), "response": ""} for i in range(3)]
    rows += [{"messages": [{"role": "user", "content": "2+3?"}, {"role": "assistant", "content": " \n"}],
              "answer": "5"}]
    path = tmp_path / "sft.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows[:3]))
    cfg = compose(ROOT / "experiments/quickstart/sft.yaml", [f"data.sources=[{{name: file, path: {path}}}]"])
    with pytest.raises(DataError, match="none of the 3 training records has a teacher response"):
        prepare_sft(cfg)
    from klear_lab.data.sources.file import FileSource

    chat = tmp_path / "chat.jsonl"
    chat.write_text(json.dumps(rows[3]) + "\n")
    assert [r.response for r in FileSource(path=str(chat)).records(0, "train")] == [None]


def test_records_all_blank_are_named_by_their_first_row_in_file_order(tmp_path):
    """Every response blank: the refusal said "none has a teacher response (... or a 'response' field)" for a file
    that has the field, and named no file; the first skipped record was the first after the mix's shuffle."""
    from klear_lab.data.sources.file import FileSource

    path = tmp_path / "blank.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"{i}+1?", "answer": str(i + 1), "response": "  "}) + "\n"
                            for i in range(4)))
    records = FileSource(path=str(path)).records(0, "train")[::-1]  # as a shuffle may leave them
    with pytest.raises(DataError, match=rf"; the first, {path}: row 1, \(.*a blank response counts as none\)"):
        check_responses(records)
    some = [Record("b/0", "b", "math", "p", "1", response="x")] + records[:2]  # rows 4 and 3, in that order
    with pytest.warns(UserWarning, match=rf"the first: 'blank/3' of source 'blank', read from {path}: row 3\)"):
        check_responses(some)
