"""A float answer that is a whole number reads as one: pandas stores an int column with gaps as floats (NaN in
the gaps), so a parquet answer of 58 read as "58.0". Only the answer: other columns keep their types."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from klear_lab.data.sources.file import FileSource
from klear_lab.errors import DataError


def _write(tmp_path, **columns):
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table(columns), path)
    return str(path)


def test_pandas_int_answers_with_a_gap_read_as_whole_numbers(tmp_path):
    pd = pytest.importorskip("pandas")
    path = tmp_path / "rows.parquet"
    pd.DataFrame({"prompt": ["a?", "b?", "c?"], "answer": [58, None, 7], "response": ["x", "y", "z"]}).to_parquet(path)
    assert pq.read_schema(path).field("answer").type == pa.float64()  # as pandas writes it
    assert [r.answer for r in FileSource(path=str(path)).records(0, "train")] == ["58", "", "7"]


def test_a_nan_answer_counts_as_a_gap(tmp_path):
    path = _write(tmp_path, prompt=["a?", "b?", "c?"], answer=[58.0, float("nan"), 2.5], response=["x", "y", "z"])
    assert [r.answer for r in FileSource(path=path).records(0, "train")] == ["58", "", "2.5"]


def test_strings_and_other_columns_keep_their_values_and_types(tmp_path):
    path = _write(tmp_path, prompt=["a?", "b?", "c?"], answer=["58.0", None, "7"], response=["x", "y", "z"],
                  score=pa.array([1.0, None, 0.0], pa.float16()), rate=[1.0, None, 0.5])
    records = FileSource(path=path).records(0, "train")
    assert [r.answer for r in records] == ["58.0", "", "7"]  # a string answer is the file's own text
    assert [r.meta["score"] for r in records] == [1.0, None, 0.0] and isinstance(records[0].meta["score"], float)
    assert [r.meta["rate"] for r in records] == [1.0, None, 0.5] and isinstance(records[0].meta["rate"], float)


def test_a_held_out_row_without_its_answer_is_still_named(tmp_path):
    path = _write(tmp_path, prompt=["a?", "b?", "c?"], answer=[58.0, float("nan"), 7.0])
    with pytest.raises(DataError, match=r"rows.parquet: row 2: field 'answer': missing \(null\); a held-out math "
                                        r"row is graded against its reference answer"):
        FileSource(path=path).records(0, "eval")
