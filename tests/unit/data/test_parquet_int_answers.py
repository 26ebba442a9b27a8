"""A parquet int column with gaps, which pandas stores as floats, is read back as ints: answer "58", not "58.0"."""

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


def test_a_nan_gap_counts_as_a_gap(tmp_path):
    path = _write(tmp_path, prompt=["a?", "b?"], answer=[58.0, float("nan")], response=["x", "y"])
    assert [r.answer for r in FileSource(path=path).records(0, "train")] == ["58", ""]


def test_fractions_strings_and_gapless_floats_are_unchanged(tmp_path):
    path = _write(tmp_path, prompt=["a?", "b?", "c?"], answer=[2.5, None, 58.0], response=["x", "y", "z"],
                  text=["58.0", None, "7"], score=[1.0, 2.0, 3.0])
    records = FileSource(path=path).records(0, "train")
    assert [r.answer for r in records] == ["2.5", "", "58.0"]  # a column with a fraction keeps its floats
    assert [r.meta["text"] for r in records] == ["58.0", None, "7"]
    assert [r.meta["score"] for r in records] == [1.0, 2.0, 3.0] and isinstance(records[0].meta["score"], float)


def test_a_held_out_row_without_its_answer_is_still_named(tmp_path):
    path = _write(tmp_path, prompt=["a?", "b?", "c?"], answer=[58.0, None, 7.0])
    with pytest.raises(DataError, match=r"rows.parquet: row 2: field 'answer': missing \(null\); a held-out math "
                                        r"row is graded against its reference answer"):
        FileSource(path=path).records(0, "eval")
