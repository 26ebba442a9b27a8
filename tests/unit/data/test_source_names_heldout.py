"""Held-out source names the run would lose without a word: a source named ``level1`` shared
``val/level1/acc`` with difficulty level 1 (written last, it replaced the source's), and a training source's
``eval_path`` that no ``data.eval_sources`` entry reads was ignored (the run scored the base config's set)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from klear_lab.builders import build_eval_records, build_train_records
from klear_lab.config.compose import compose
from klear_lab.errors import DataError

SFT = Path(__file__).resolve().parents[3] / "experiments/quickstart/sft.yaml"


def jsonl(path: Path, n: int = 3, **extra) -> Path:
    path.write_text("".join(json.dumps({"prompt": f"{path.stem} {i}", "answer": "1", "response": "r", **extra}) + "\n"
                            for i in range(n)))
    return path


@pytest.mark.parametrize("node", ["{{name: file, path: {d}/level1.jsonl}}",
                                  "{{name: file, path: {d}/test.jsonl, label: level12}}",
                                  "{{name: file, path: {d}/rows.jsonl}}"])
def test_a_heldout_source_named_like_a_level_metric_is_refused(tmp_path, node):
    jsonl(tmp_path / "level1.jsonl"), jsonl(tmp_path / "test.jsonl"), jsonl(tmp_path / "rows.jsonl", source="level3")
    cfg = compose(SFT, [f"data.eval_sources=[{{name: arith, n_prompts: 5}}, {node.format(d=tmp_path)}]"])
    with pytest.raises(DataError, match=r"^data.eval_sources.1 \(.*\.jsonl\): its held-out records are named "
                                        r"'level\d+', and val/level\d+/acc is the accuracy of difficulty level \d+; "
                                        "give the source another name with `label:`"):
        build_eval_records(cfg)


def test_a_label_clears_a_level_name_and_other_names_pass(tmp_path):
    level1 = jsonl(tmp_path / "level1.jsonl")
    cfg = compose(SFT, [f"data.eval_sources=[{{name: file, path: {level1}, label: level1_set}}, "
                        f"{{name: file, path: {jsonl(tmp_path / 'levels.jsonl')}}}]"])
    assert {r.source for r in build_eval_records(cfg)} == {"level1_set", "levels"}


def test_an_eval_path_no_eval_source_reads_is_warned(tmp_path):
    train, test = jsonl(tmp_path / "train.jsonl"), jsonl(tmp_path / "test.jsonl")
    node = f"{{name: file, path: {train}, eval_path: {test}}}"
    cfg = compose(SFT, [f"data.sources=[{{name: arith_r1, n_prompts: 5}}, {node}]"])
    with pytest.warns(UserWarning, match=rf"data.sources.1 sets eval_path: {test}, which no data.eval_sources entry "
                                         rf"reads, .*; add `{{name: file, path: {train}, eval_path: {test}}}` to "
                                         "data.eval_sources"):
        build_train_records(cfg)


@pytest.mark.parametrize("heldout", ["{node}", "{{name: file, path: {test}, label: mine}}"])
def test_an_eval_path_an_eval_source_reads_is_not_warned(tmp_path, heldout):
    train, test = jsonl(tmp_path / "train.jsonl"), jsonl(tmp_path / "test.jsonl")
    node = f"{{name: file, path: {train}, eval_path: {test}}}"
    cfg = compose(SFT, [f"data.sources=[{node}]", f"data.eval_sources=[{heldout.format(node=node, test=test)}]"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_train_records(cfg)
