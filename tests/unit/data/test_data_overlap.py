"""Held-out problems that are also training prompts are warned about (a file listed as both, no eval_path)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from klear_lab import builders
from klear_lab.config.compose import compose
from klear_lab.data.overlap import trained_heldout, warn_trained_heldout
from klear_lab.data.records import Record

QUICK = Path(__file__).resolve().parents[3] / "experiments/quickstart"


def _record(uid: str, prompt: str) -> Record:
    return Record(uid, "s", "math", prompt, "1")


def test_prompts_match_with_their_whitespace_collapsed_only():
    train = [_record("t/0", "What is  1+1?\n"), _record("t/1", "Name a prime.")]
    held = [_record("e/0", "What is 1+1?"), _record("e/1", "what is 1+1?"), _record("e/2", "Name a prime")]
    assert [r.uid for r in trained_heldout(train, held)] == ["e/0"]
    with pytest.warns(UserWarning, match=r"data.eval_sources: 1 of 3 held-out problems are also training prompts "
                                         r"of data.sources \(the first: 'e/0' of 's'\)"):
        warn_trained_heldout(train, held)


def test_a_file_read_as_both_training_and_held_out_data_is_warned(tmp_path):
    """Its eval split is the same file: every held-out problem was trained on, silently (found by a review)."""
    path = tmp_path / "one.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"{i} + 1 = ?", "answer": str(i + 1)}) + "\n" for i in range(5)))
    source = f"{{name: file, path: {path}, format: records, task: math}}"
    cfg = compose(QUICK / "rl.yaml", ["model.init_from=null", f"data.sources=[{source}]",
                                      f"data.eval_sources=[{source}]"])
    records, _ = builders.build_train_records(cfg)
    with pytest.warns(UserWarning, match="5 of 5 held-out problems are also training prompts"):
        warn_trained_heldout(records, builders.build_eval_records(cfg))


@pytest.mark.parametrize("experiment", ["rl.yaml", "code_rl.yaml"])  # the arithmetic and the code world
def test_the_embedded_world_keeps_its_held_out_problems_apart(experiment):
    cfg = compose(QUICK / experiment, ["model.init_from=null"])
    records, _ = builders.build_train_records(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_trained_heldout(records, builders.build_eval_records(cfg))
