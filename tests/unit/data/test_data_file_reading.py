"""How a ``file`` source reads what a user brings (a walkthrough of "Your own data"): a misspelt required column,
verl's ``ability`` in plain records, a chat column under another name, a local folder's typo, a saved
``DatasetDict``'s splits, compressed files and folders of shards, and which bad row is "the first"."""

from __future__ import annotations

import gzip
import json
import warnings

import datasets
import pytest

from klear_lab.data.records import Record, require_gradeable
from klear_lab.data.sources.file import FileSource
from klear_lab.data.sources.file_read import unavailable
from klear_lab.errors import DataError

ROWS = [{"question": f"What is {i}+1?", "sol": str(i + 1), "resp": f"<think>x</think> \\boxed{{{i + 1}}}"}
        for i in range(3)]


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_misspelt_column_of_a_required_field_is_named_with_the_columns_the_rows_have(tmp_path):
    """It said "row 1: field 'questin': missing"; the columns the rows have came only for optional fields."""
    path = _write(tmp_path / "d.jsonl", ROWS)
    source = FileSource(path=str(path), fields={"prompt": "questin", "answer": "sol", "response": "resp"})
    with pytest.raises(DataError, match=r"fields: \{prompt: questin\}: no row \(of 3 read\) has a column "
                                        r"'questin'; the rows' columns: question, resp, sol"):
        source.records(0, "train")


def test_an_unmapped_column_is_named_with_the_columns_the_row_has(tmp_path):
    path = _write(tmp_path / "d.jsonl", ROWS)
    with pytest.raises(DataError, match=r"row 1: field 'prompt': missing \(the row's columns: question, resp, sol; "
                                        r"name the column that holds it with the source's "
                                        r"`fields: \{prompt: COLUMN\}`"):
        FileSource(path=str(path)).records(0, "train")


def test_records_read_their_task_from_an_ability_column_as_verl_names_it(tmp_path):
    rows = [{"prompt": "2+3?", "answer": "5", "ability": "physics"},
            {"prompt": "Write f.", "ability": "CODE", "tests": [{"stdin": "1", "stdout": "1"}]}]
    path = _write(tmp_path / "d.jsonl", rows)
    with pytest.warns(UserWarning, match=r"1 row\(s\) name a task that is neither math nor code \('physics'"):
        records = FileSource(path=str(path)).records(0, "train")
    assert [r.task for r in records] == ["math", "code"]
    assert all("ability" not in r.meta for r in records)


def test_a_chat_column_mapped_in_fields_picks_the_messages_layout(tmp_path):
    """``fields: {messages: conversations}`` with ``format: auto`` was read as records: "field 'prompt': missing"."""
    chat = [{"role": "user", "content": "2+3?"}, {"role": "assistant", "content": "<think>x</think> 5"}]
    path = _write(tmp_path / "d.jsonl", [{"conversations": chat}])
    [record] = FileSource(path=str(path), fields={"messages": "conversations"}).records(0, "train")
    assert (record.prompt, record.response) == ("2+3?", "<think>x</think> 5")


def test_a_local_folder_typo_is_not_called_a_hub_problem(tmp_path, monkeypatch):
    from klear_lab.errors import OFFLINE_VARS

    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert unavailable("d/sft_dss") == f"no such file under the working directory {tmp_path} (nor a dataset directory)"
    for name in OFFLINE_VARS:  # online, a folder named like a hub organisation does not hide its datasets
        monkeypatch.delenv(name, raising=False)
    assert unavailable("d/sft_dss") is None
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert unavailable("org/set") == (f"no such file under the working directory {tmp_path}, and as a hub id: "
                                      "HF_HUB_OFFLINE is set, no hub download")


def test_a_saved_dataset_dict_serves_train_to_training_and_test_to_held_out_scoring(tmp_path):
    """Held-out scoring read the train split of a DatasetDict that has a test split."""
    rows = [{"prompt": f"{i}+1?", "answer": str(i + 1)} for i in range(5)]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows[:3]),
                          "test": datasets.Dataset.from_list(rows[3:])}).save_to_disk(str(tmp_path / "dd"))
    source = FileSource(path=str(tmp_path / "dd"))
    assert [r.prompt for r in source.records(0, "train")] == ["0+1?", "1+1?", "2+1?"]
    assert [r.prompt for r in source.records(0, "eval")] == ["3+1?", "4+1?"]
    datasets.DatasetDict({"dev": datasets.Dataset.from_list(rows), "test": datasets.Dataset.from_list(rows)}
                         ).save_to_disk(str(tmp_path / "no_train"))
    with pytest.raises(DataError, match=r"has splits \['dev', 'test'\] and none is 'train': point the path at one "
                                        rf"split \(path: {tmp_path}/no_train/dev\)"):
        FileSource(path=str(tmp_path / "no_train")).records(0, "train")


def test_compressed_files_and_folders_of_shards_are_named_as_such(tmp_path):
    """A .jsonl.gz was refused as "byte 0x8b ... is not UTF-8 (re-encode it)"; a folder of .jsonl files got the
    datasets library's "neither a Dataset directory nor a DatasetDict directory"."""
    packed = tmp_path / "d.jsonl.gz"
    packed.write_bytes(gzip.compress(b'{"prompt": "2+3?", "answer": "5"}\n'))
    with pytest.raises(DataError, match=r"d\.jsonl\.gz: a gzip-compressed file: decompress it first"):
        FileSource(path=str(packed)).records(0, "train")
    (tmp_path / "shards").mkdir()
    _write(tmp_path / "shards" / "part-0.jsonl", ROWS)
    with pytest.raises(DataError, match=r"shards: a folder of \.jsonl files, not a datasets\.save_to_disk directory"):
        FileSource(path=str(tmp_path / "shards")).records(0, "train")


def test_an_upper_case_suffix_is_read_as_its_format(tmp_path):
    datasets.Dataset.from_list([{"prompt": "2+3?", "answer": "5"}]).to_parquet(str(tmp_path / "D.PARQUET"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [r.answer for r in FileSource(path=str(tmp_path / "D.PARQUET")).records(0, "train")] == ["5"]


def test_the_first_record_that_cannot_be_graded_is_the_lowest_row_whatever_the_order():
    """It was the first after the data mix's shuffle: row 3 with seed 0, row 18 with seed 1."""
    records = [Record(f"r/{n}", "r", "math", "p", "", origin=f"d.jsonl: row {n}") for n in (18, 3, 9)]
    with pytest.raises(DataError, match=r"the first, 'r/3' .*read from d\.jsonl: row 3,"):
        require_gradeable(records, "data.sources")


def test_online_a_hub_failure_of_a_local_folders_name_says_no_file_is_there_either(tmp_path, monkeypatch):
    """Online, ``d/sft_dss`` beside a folder ``d`` is tried on the hub; its failure names the local folder too."""
    from klear_lab.errors import OFFLINE_VARS

    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    for name in OFFLINE_VARS:
        monkeypatch.delenv(name, raising=False)

    def not_on_the_hub(path, split):
        raise FileNotFoundError(f"Dataset '{path}' doesn't exist on the Hub or cannot be accessed.")

    monkeypatch.setattr(datasets, "load_dataset", not_on_the_hub)
    with pytest.raises(DataError, match=r"d/sft_dss: cannot load dataset \(nor is it a file or dataset directory "
                                        r"under d/ here\)"):
        FileSource(path="d/sft_dss").records(0, "train")
