"""The ``file`` source: verl / messages / records layouts in jsonl, json, parquet and datasets dirs."""

from __future__ import annotations

import json
import os
import re
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

from klear_lab.data.sources.file import FileSource
from klear_lab.errors import ConfigError, DataError
from klear_lab.registry import SOURCE

VERL = [
    {"data_source": "math_longcot_math_verify", "ability": "math",
     "prompt": [{"role": "user", "content": "What is 2+3?"}],
     "reward_model": {"ground_truth": "5", "style": "rule"}, "__index_level_0__": 7},
    {"data_source": "coder1_longcot", "ability": "code",
     "prompt": [{"role": "system", "content": "sys"}, {"role": "user", "content": "Echo the input."}],
     "reward_model": {"ground_truth": json.dumps({"inputs": ["1\n", "2\n"], "outputs": ["1", "2"]}),
                      "style": "rule"}, "__index_level_0__": 8},
]
MESSAGES = [
    {"messages": [{"role": "user", "content": "Compute 1+1."},
                  {"role": "assistant", "content": "<think>1+1=2</think>\\boxed{2}"}], "answer": "2"},
    {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Compute 2+2."},
                  {"role": "assistant", "content": "<think>4</think>\\boxed{4}"}], "answer": 4},
]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _write(tmp_path, rows, kind):
    if kind == "jsonl":
        return str(_jsonl(tmp_path / "data.jsonl", rows))
    if kind == "json":
        (tmp_path / "data.json").write_text(json.dumps(rows))
        return str(tmp_path / "data.json")
    import datasets

    ds = datasets.Dataset.from_list(rows)
    if kind == "parquet":
        ds.to_parquet(str(tmp_path / "data.parquet"))
        return str(tmp_path / "data.parquet")
    ds.save_to_disk(str(tmp_path / "ds"))
    return str(tmp_path / "ds")


@pytest.mark.parametrize("kind", ["jsonl", "json", "parquet", "hf_dir"])
def test_verl_round_trip(tmp_path, kind):
    math, code = FileSource(path=_write(tmp_path, VERL, kind)).records(0, "train")
    assert (math.task, math.prompt, math.answer, math.source) == ("math", "What is 2+3?", "5",
                                                                  "math_longcot_math_verify")
    assert math.meta["__index_level_0__"] == 7 and math.response is None
    assert (code.task, code.prompt, code.source) == ("code", "Echo the input.", "coder1_longcot")
    assert json.loads(code.answer)["outputs"] == ["1", "2"]
    assert code.tests == ({"stdin": "1\n", "stdout": "1"}, {"stdin": "2\n", "stdout": "2"})  # a program's


def test_a_label_names_the_source_and_the_tasks_still_come_from_the_file(tmp_path):
    """Per-source metrics (val/<source>/acc) are named after a benchmark, not its rows' data_source."""
    math, code = FileSource(path=_write(tmp_path, VERL, "jsonl"), label="lcb_v5").records(0, "eval")
    assert (math.source, code.source, math.task, code.task) == ("lcb_v5", "lcb_v5", "math", "code")
    with pytest.raises(ValueError, match="label"):
        FileSource(path="x.jsonl", label=" ")


@pytest.mark.parametrize("kind", ["jsonl", "parquet", "hf_dir"])
def test_messages_round_trip(tmp_path, kind):
    rows = [{**r, "answer": str(r["answer"])} for r in MESSAGES]  # arrow needs one type per column
    a, b = FileSource(path=_write(tmp_path, rows, kind), format="messages").records(0, "train")
    assert (a.prompt, a.response, a.answer) == ("Compute 1+1.", "<think>1+1=2</think>\\boxed{2}", "2")
    assert (b.prompt, b.answer, b.task) == ("Compute 2+2.", "4", "math")
    assert a.uid != b.uid


def test_records_with_field_mapping_and_meta(tmp_path):
    rows = [{"question": "Q1", "solution": 3, "level": 2, "pass_rate": 0.25}]
    path = str(_jsonl(tmp_path / "mine.jsonl", rows))
    src = FileSource(path=path, fields={"prompt": "question", "answer": "solution", "difficulty": "level"},
                     task="math", quality_rank=3)
    (r,) = src.records(0, "train")
    assert (r.prompt, r.answer, r.difficulty, r.source, r.meta) == ("Q1", "3", 2, "mine", {"pass_rate": 0.25})
    assert src.quality_rank == 3


def test_a_file_named_like_code_holds_math_unless_its_rows_say_code(tmp_path):
    """``task: auto`` reads the rows (verl ``ability``, then their own ``data_source``): a math file named
    decoded_eval.jsonl or barcode_rl.jsonl was taken for code, its name standing in for the source."""
    rows = [{"prompt": "What is 2+3?", "answer": "5"}]
    for name in ("decoded_eval.jsonl", "barcode_rl.jsonl", "sft_unicode.jsonl"):
        (r,) = FileSource(path=str(_jsonl(tmp_path / name, rows))).records(0, "eval")
        assert (r.task, r.source) == ("math", name.removesuffix(".jsonl"))
    (code,) = FileSource(path=str(_jsonl(tmp_path / "x.jsonl", [{k: v for k, v in VERL[1].items()
                                                                  if k != "ability"}]))).records(0, "eval")
    assert code.task == "code"  # data_source coder1_longcot, no ability column
    tested = {"prompt": "Write f.", "answer": "def f(x): return x", "tests": [{"input": [1], "output": 1}]}
    (program,) = FileSource(path=str(_jsonl(tmp_path / "lcb.jsonl", [tested]))).records(0, "eval")
    assert program.task == "code"  # hidden tests make it code whatever the file is called
    (upper,) = FileSource(path=str(_jsonl(tmp_path / "u.jsonl", [{**rows[0], "source": "LiveCodeBench"}]))).records(
        0, "eval")
    assert upper.task == "code"


def test_text_is_split_at_newlines_only_and_bad_bytes_are_located(tmp_path):
    """A JSON string may hold U+2028 or U+0085 raw (``ensure_ascii=False``): splitlines() cut such a row in two
    and called the valid file invalid JSON. A Latin-1 byte named no row ("not UTF-8 text")."""
    rows = [{"prompt": "a\u2028b\u0085c", "answer": "1"}, {"prompt": "d", "answer": "2"}]
    path = tmp_path / "raw.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\r\n" for r in rows), encoding="utf-8")
    assert [r.prompt for r in FileSource(path=str(path)).records(0, "eval")] == ["a\u2028b\u0085c", "d"]
    path.write_text("".join(json.dumps(r) + "\r" for r in rows))  # old Mac line ends
    assert [r.prompt for r in FileSource(path=str(path)).records(0, "eval")] == ["a\u2028b\u0085c", "d"]
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"prompt": "x", "answer": "1"}\n{"prompt": "caf\xe9", "answer": "2"}\n')
    with pytest.raises(DataError, match=r"latin.jsonl: row 2: byte 0xe9 at offset 46 is not UTF-8"):
        FileSource(path=str(latin)).records(0, "eval")
    latin.write_bytes(b"\xef\xbb\xbf" + latin.read_bytes())  # offsets count the BOM
    with pytest.raises(DataError, match=r"latin.jsonl: row 2: byte 0xe9 at offset 49 is not UTF-8"):
        FileSource(path=str(latin)).records(0, "eval")


@pytest.mark.parametrize("name", ["bom.jsonl", "bom.json"])
def test_a_utf8_file_with_a_byte_order_mark_is_read(tmp_path, name):
    """Windows editors save UTF-8 with a BOM: "row 1: invalid JSON (Unexpected UTF-8 BOM)" refused it."""
    rows = [{"prompt": "p1", "answer": "1"}, {"prompt": "p2", "answer": "2"}]
    path = tmp_path / name
    body = json.dumps(rows) if name.endswith(".json") else "".join(json.dumps(r) + "\n" for r in rows)
    path.write_bytes(b"\xef\xbb\xbf" + body.encode())
    assert [r.prompt for r in FileSource(path=str(path)).records(0, "eval")] == ["p1", "p2"]


def test_eval_path_limit_and_auto_detect(tmp_path):
    train = str(_jsonl(tmp_path / "train.jsonl", MESSAGES * 3))
    held = str(_jsonl(tmp_path / "eval.jsonl", VERL))
    assert FileSource(path=train).records(0, "eval") == FileSource(path=train).records(0, "train")  # an eval source
    src = FileSource(path=train, eval_path=held, limit=4)
    assert len(src.records(0, "train")) == 4 and src.records(0, "train")[0].response
    assert [r.task for r in src.records(0, "eval")] == ["math", "code"]


def test_missing_file_names_path(tmp_path):
    with pytest.raises(DataError, match="nope.jsonl"):
        FileSource(path=str(tmp_path / "nope.jsonl")).records(0, "train")
    with pytest.raises(DataError, match="no path"):
        FileSource().records(0, "train")


def test_hub_id_offline_is_a_data_error():
    with pytest.raises(DataError, match="someone/some-dataset"):
        FileSource(path="someone/some-dataset").records(0, "train")


def _bad(row: dict, where: tuple) -> dict:
    """A copy of ``row`` with the nested key path ``where`` set (or deleted if its last value is ...)."""
    out = json.loads(json.dumps(row))
    target = out
    for key in where[:-2]:
        target = target[key]
    if where[-1] is ...:
        del target[where[-2]]
    else:
        target[where[-2]] = where[-1]
    return out


@pytest.mark.parametrize(("rows", "fmt", "field"), [
    ([VERL[0], _bad(VERL[0], ("prompt", ...))], "auto", "'prompt'"),
    ([VERL[0], _bad(VERL[0], ("prompt", 5))], "auto", "'prompt'"),
    ([VERL[0], _bad(VERL[0], ("prompt", [{"role": "system", "content": "x"}]))], "auto", "'prompt'"),
    ([VERL[0], _bad(VERL[0], ("reward_model", "ground_truth", ...))], "auto", "'reward_model.ground_truth'"),
    ([VERL[0], _bad(VERL[1], ("reward_model", "ground_truth", "not json"))], "auto",
     "'reward_model.ground_truth'"),
    ([VERL[0], _bad(VERL[0], ("data_source", 3))], "auto", "'data_source'"),
    ([VERL[0], _bad(VERL[1], ("reward_model", "ground_truth", json.dumps({"inputs": ["1\n"], "outputs": []})))],
     "auto", "'reward_model.ground_truth'"),  # a test without its expected output was dropped silently
    ([VERL[0], _bad(VERL[1], ("reward_model", "ground_truth", json.dumps({"inputs": [1], "outputs": [1]})))],
     "auto", "'reward_model.ground_truth'"),
    ([{"prompt": "p", "answer": "a"}, {"prompt": "p", "answer": "a", "tests": [{"input": 5, "output": 5}]}],
     "records", "'tests.0'"),  # was a TypeError mid-training, naming nothing
    ([{"prompt": "p", "answer": "a"}, {"prompt": "p", "answer": "a", "tests": [{"input": [1]}]}],
     "records", "'tests.0'"),
    ([MESSAGES[0], _bad(MESSAGES[0], ("messages", "hi"))], "messages", "'messages'"),
    ([MESSAGES[0], _bad(MESSAGES[0], ("messages", [{"role": "assistant", "content": "x"}]))], "messages",
     "'messages'"),
    ([MESSAGES[0], _bad(MESSAGES[0], ("answer", [1]))], "messages", "'answer'"),
    ([{"prompt": "p", "answer": "a"}, {"prompt": "p", "answer": "a", "difficulty": "hard"}], "records",
     "'difficulty'"),
    ([{"prompt": "p", "answer": "a"}, {"answer": "a"}], "records", "'prompt'"),
    ([{"prompt": "p", "answer": "a"}, {"prompt": "p", "answer": "a", "difficulty": 0}], "records",
     "'difficulty': levels start at 1"),  # level 0 fell out of every band, silently
    ([{"prompt": "p", "answer": "a"}, {"prompt": "p", "answer": "a", "difficulty": 2.5}], "records",
     "'difficulty': levels are whole numbers, got 2.5"),
    ([{"prompt": "p", "answer": "a"}, {"prompt": "p", "answer": "a", "response_correct": "yes"}], "records",
     "'response_correct'"),
    ([{"prompt": "p", "answer": "a"}, {"prompt": " \n", "answer": "a"}], "records", "'prompt': the prompt is empty"),
    ([{"messages": [{"role": "user", "content": "q"}]}, {"messages": [{"role": "user", "content": ""}]}],
     "messages", "'messages': the prompt is empty"),
])
def test_bad_row_names_file_row_and_field(tmp_path, rows, fmt, field):
    path = _jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(DataError) as err:
        FileSource(path=str(path), format=fmt).records(0, "train")
    assert str(path) in str(err.value) and "row 2" in str(err.value) and field in str(err.value)


def test_repeated_uid_warns_with_rows(tmp_path):
    rows = [{"uid": "a", "prompt": "p", "answer": "1"}, {"uid": "b", "prompt": "q", "answer": "2"},
            {"uid": "a", "prompt": "p", "answer": "1"}, {"uid": 7, "prompt": "r", "answer": "3"}]
    path = _jsonl(tmp_path / "dup.jsonl", rows)
    with pytest.warns(UserWarning, match=r"dup\.jsonl: 1 row\(s\) repeat an earlier row's uid \(the first: row 3 "
                      r"repeats row 1's 'a'\)"):
        assert len(FileSource(path=str(path)).records(0, "train")) == 4
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FileSource(path=str(path), limit=2).records(0, "train")  # unique uids: no warning


def test_an_ability_that_is_neither_math_nor_code_is_read_by_the_row_and_warned(tmp_path):
    """verl rows of ``ability: physics`` were read as math in silence; ``Math`` was not read as math at all."""
    rows = [{**VERL[0], "ability": "Math"}, {**VERL[0], "ability": "physics"}, {**VERL[1], "ability": "logic"}]
    path = _jsonl(tmp_path / "mixed.jsonl", rows)
    with pytest.warns(UserWarning, match=r"mixed\.jsonl: 2 row\(s\) name a task that is neither math nor code "
                      r"\('logic', 'physics'; the first: row 2, read as math\)"):
        records = FileSource(path=str(path)).records(0, "train")
    assert [r.task for r in records] == ["math", "math", "code"]  # the third by its source's name
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the file's task: says which: nothing to warn about
        assert {r.task for r in FileSource(path=str(path), task="math").records(0, "train")} == {"math"}


def test_a_whole_float_difficulty_is_its_level(tmp_path):
    """A parquet int column with gaps holds floats: 2.0 was refused as not an int (a review)."""
    path = _jsonl(tmp_path / "levels.jsonl", [{"prompt": "p", "answer": "1", "difficulty": 2.0},
                                                {"prompt": "q", "answer": "1"}])
    records = FileSource(path=str(path)).records(0, "train")
    assert [(r.difficulty, r.difficulty_known) for r in records] == [(2, True), (1, False)]


def test_a_file_read_twice_in_a_process_warns_once(tmp_path):
    """A run that trains and evaluates on one file read it twice and gave each warning twice."""
    rows = [{**VERL[0], "ability": "physics"}, {**VERL[0], "ability": "physics"}]
    path = _jsonl(tmp_path / "twice.jsonl", rows)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for split in ("train", "eval", "train"):
            FileSource(path=str(path)).records(0, split)
    assert [str(w.message).split(": ", 1)[1][:20] for w in caught] == ["2 row(s) name a task"], caught


def test_bad_json_line_and_non_object_row(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(VERL[0]) + "\n\n{not json\n")
    with pytest.raises(DataError, match=r"bad\.jsonl: row 3: invalid JSON"):
        FileSource(path=str(path)).records(0, "train")
    path.write_text(json.dumps(VERL[0]) + "\n[1, 2]\n")
    with pytest.raises(DataError, match=r"bad\.jsonl: row 2: expected an object"):
        FileSource(path=str(path), format="verl").records(0, "train")


def test_bad_parquet_row_is_numbered(tmp_path):
    rows = [{"prompt": "p", "answer": "a"}, {"prompt": None, "answer": "b"}]
    path = _write(tmp_path, rows, "parquet")
    with pytest.raises(DataError, match=r"data\.parquet: row 2: field 'prompt': missing \(null\)"):
        FileSource(path=path).records(0, "train")  # said "expected str, got NoneType"


EMPTY_ANSWER = "empty; a math row without a response is graded against its reference answer"


@pytest.mark.parametrize("kind", ["jsonl", "json", "parquet", "hf_dir"])
def test_an_empty_answer_names_file_row_and_field(tmp_path, kind):
    """It loaded, and was refused later by uid and source only (require_gradeable), without file or row."""
    rows = [{"prompt": "1+1?", "answer": "2"}, {"prompt": "2+3?", "answer": "5"}, {"prompt": "2+2?", "answer": ""}]
    path = _write(tmp_path, rows, kind)
    with pytest.raises(DataError) as err:
        FileSource(path=path).records(0, "train")
    assert str(err.value) == f"{path}: row 3: field 'answer': {EMPTY_ANSWER}"


@pytest.mark.parametrize(("rows", "fmt", "field"), [
    ([{"prompt": "p", "answer": "a"}, {"prompt": "p", "answer": " \n\t"}], "records", "'answer'"),
    ([VERL[0], _bad(VERL[0], ("reward_model", "ground_truth", "  "))], "verl", "'reward_model.ground_truth'"),
])
def test_a_whitespace_only_answer_names_file_row_and_field(tmp_path, rows, fmt, field):
    path = _jsonl(tmp_path / "blank.jsonl", rows)
    with pytest.raises(DataError) as err:
        FileSource(path=str(path), format=fmt).records(0, "train")
    assert str(err.value) == f"{path}: row 2: field {field}: {EMPTY_ANSWER}"


def test_rows_that_need_no_answer_may_have_an_empty_one(tmp_path):
    """SFT rows (messages, or records with a response: the answer is optional) and code records (graded by
    their tests) load with none."""
    path = _jsonl(tmp_path / "sft.jsonl", [{**MESSAGES[0], "answer": ""}])
    assert FileSource(path=str(path)).records(0, "train")[0].answer == ""
    code = {"prompt": "Write f.", "answer": " ", "task": "code", "tests": [{"input": [1], "output": 2}]}
    path = _jsonl(tmp_path / "code.jsonl", [code])
    assert FileSource(path=str(path)).records(0, "train")[0].tests == ({"input": [1], "output": 2},)
    sft = {"prompt": "What is 2+2?", "response": "<think>2+2=4</think> \\boxed{4}", "answer": ""}
    path = _jsonl(tmp_path / "records_sft.jsonl", [sft])  # an SFT row trains on its response (a review)
    assert FileSource(path=str(path)).records(0, "train")[0].response == sft["response"]


@pytest.mark.parametrize(("field", "value"), [("format", "csv"), ("task", "chem"), ("limit", 0),
                                              ("fields", {"question": "prompt"})])
def test_validation_names_field(field, value):
    with pytest.raises(ConfigError, match=field):
        SOURCE.build({"name": "file", "path": "x.jsonl", field: value})


def test_hub_id_online_uses_load_dataset(monkeypatch):
    import datasets

    calls = []

    def fake_load(path, split):
        calls.append((path, split))
        return datasets.Dataset.from_list(VERL[:1])

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    (r,) = FileSource(path="Suu/KlearReasoner-MathSub-30K").records(0, "train")
    assert calls == [("Suu/KlearReasoner-MathSub-30K", "train")] and r.answer == "5"


def test_dataset_dict_dir_uses_train_split(tmp_path):
    import datasets

    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(VERL[:1]),
                               "test": datasets.Dataset.from_list(VERL[:1] * 2)})
    dd.save_to_disk(str(tmp_path / "dd"))
    assert len(FileSource(path=str(tmp_path / "dd")).records(0, "train")) == 1


def test_a_home_relative_path_is_read(tmp_path, monkeypatch):
    """``path: ~/data/x.jsonl`` in a YAML file was looked for under a directory named "~"."""
    from klear_lab.data.sources.file_read import unavailable

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "d.jsonl").write_text('{"prompt": "p", "answer": "1"}\n')
    assert unavailable("~/d.jsonl") is None and unavailable("~/nothere.jsonl") is not None
    (record,) = FileSource(path="~/d.jsonl").records(0, "train")
    assert (record.prompt, record.answer) == ("p", "1")


@pytest.mark.parametrize(("name", "text", "said"), [
    ("dup.jsonl", '{"prompt": "p", "answer": "1"}\n{"prompt": "p", "answer": "5", "answer": "6"}\n',
     "row 2: 'answer' is given twice: which value is meant?"),  # json kept "6" in silence
    ("dup.json", '[{"prompt": "p", "answer": "1"}, {"prompt": "p", "answer": "5", "answer": "6"}]',
     "a row gives 'answer' twice"),
    ("rows.csv", "prompt,answer\n1+1?,2\n", "row 1: invalid JSON (Expecting value); a .csv is read as JSON lines"),
    ("array.jsonl", '[{"prompt": "p", "answer": "1"}]\n',
     "row 1: expected an object, got list (rows in one JSON array go in a .json file"),
])
def test_a_file_in_another_shape_says_what_it_is_read_as(tmp_path, name, text, said):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(DataError, match=re.escape(said)):
        FileSource(path=str(path)).records(0, "train")


@pytest.mark.parametrize("fmt", ["messages", "verl"])
def test_turns_a_record_leaves_out_are_warned_with_their_roles(tmp_path, fmt):
    """A system prompt, earlier turns and turns after the reply were dropped in silence."""
    def chat(*roles):
        return [{"role": role, "content": f"{role} {i}"} for i, role in enumerate(roles)]

    if fmt == "messages":
        rows = [{"messages": chat("user", "assistant"), "answer": "1"},
                {"messages": chat("system", "user", "assistant", "user", "assistant"), "answer": "2"},
                {"messages": chat("user", "assistant", "user"), "answer": "3"}]
        said = r"2 row\(s\) hold turns their record leaves out \(the first: row 2, 1 system, 1 user, 1 assistant\)"
    else:
        rows = [{**VERL[0], "prompt": chat("user")}, {**VERL[0], "prompt": chat("system", "user")}]
        said = r"1 row\(s\) hold turns their record leaves out \(the first: row 2, 1 system\)"
    path = _jsonl(tmp_path / f"chat_{fmt}.jsonl", rows)
    with pytest.warns(UserWarning, match=said):
        records = FileSource(path=str(path)).records(0, "train")
    if fmt == "messages":  # what the record keeps: the last user turn before the last reply, and that reply
        assert [(r.prompt, r.response) for r in records] == [
            ("user 0", "assistant 1"), ("user 3", "assistant 4"), ("user 0", "assistant 1")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one user turn (and its reply) per row: nothing left out
        FileSource(path=str(path), limit=1).records(0, "train")


def test_a_missing_training_or_held_out_file_is_named_with_its_key(tmp_path, monkeypatch):
    """The run said ``data file d/nope.jsonl: no such file ...`` without the key, which ``--dry-run`` names."""
    from klear_lab import builders
    from klear_lab.config.compose import compose

    monkeypatch.chdir(tmp_path)
    cfg = compose(None, ["data.sources=[{name: arith_r1, n_prompts: 10}, {name: file, path: d/nope.jsonl}]"])
    with pytest.raises(DataError, match=r"^data\.sources\.1\.path: data file d/nope\.jsonl: no such file under "):
        builders.build_train_records(cfg)
    _jsonl(tmp_path / "train.jsonl", [{"prompt": "p", "answer": "1"}])
    cfg = compose(None, ["data.eval_sources=[{name: file, path: train.jsonl, eval_path: d/ev.jsonl}]"])
    with pytest.raises(DataError, match=r"^data\.eval_sources\.0\.eval_path: data file d/ev\.jsonl: no such file"):
        builders.build_eval_records(cfg)


def test_an_empty_path_names_its_config_key_in_the_run_and_the_dry_run():
    """``path: ''`` said "source 'file': no path set" naming no key, and the dry run said ready (a walkthrough)."""
    from pathlib import Path

    from klear_lab.builders import build_train_records, unavailable_data
    from klear_lab.config.compose import compose

    experiment = Path(__file__).resolve().parents[3] / "experiments/quickstart/sft.yaml"
    cfg = compose(experiment, ["data.sources=[{name: file, path: ''}]"])
    (key, why), = unavailable_data(cfg)
    assert key == "data.sources.0.path" and why.startswith("'': no path set: give path (a .jsonl")
    with pytest.raises(DataError, match=r"^data\.sources\.0\.path: data file '': no path set for the train split"):
        build_train_records(cfg)


def test_a_blank_path_is_no_path_in_the_run_as_in_the_dry_run():
    """``path: '  '``: the dry run said "no path set", the run "no such file under the working directory" (a review)."""
    assert FileSource(path="  ").unavailable("train")[1].startswith("'  ': no path set")
    with pytest.raises(DataError, match=r"^data file '  ': no path set for the train split"):
        FileSource(path="  ").records(0, "train")
