"""The sweep's up-front decontamination check (``data_checks._check_decontamination``) works from the records the
check read, not from a second read of each file: a paper-scale corpus was parsed twice before any trial."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from klear_lab.cli_sweep import main

HELD = [f"Compute the sum of the first {k} odd numbers and then add {k} to the result please." for k in range(3)]
WORLD = "{name: arith_r1, n_prompts: 50, levels: [1], level_weights: [1.0]}"


def jsonl(path: Path, prompts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"prompt": p, "answer": "1", "response": "1"}) + "\n" for p in prompts))
    return path


def spec_file(tmp_path: Path, train: Path, held: Path) -> Path:
    """Two arms over ``optim.lr`` that read one training file beside a generated world, decontaminated."""
    (tmp_path / "exp.yaml").write_text("run: {name: toy, kind: sft}\n")
    body = {"name": "toy", "experiment": "exp.yaml", "axes": {"optim.lr": [0.001, 0.002]}, "seeds": [0],
            "objective": {"metric": "val/acc", "direction": "maximize"}, "metrics": ["train/loss"],
            "out_dir": str(tmp_path / "out"), "overrides": [
                f"data.sources=[{{name: file, path: {train}, format: records, label: mine}}, {WORLD}]",
                f"data.eval_sources=[{{name: file, path: {held}, format: records}}]", "data.decontaminate_ngram=9"]}
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


@pytest.fixture
def reads(monkeypatch) -> list[tuple[str, str]]:
    """(file, split) of each read of a data file."""
    from klear_lab.data.sources.file import FileSource

    calls: list[tuple[str, str]] = []
    real = FileSource.records
    monkeypatch.setattr(FileSource, "records", lambda self, seed, split: calls.append((self.path, split))
                        or real(self, seed, split))
    return calls


def test_each_file_is_read_once_with_decontamination_on(tmp_path, reads, monkeypatch, capsys):
    from klear_lab.data import decontaminate

    pools: list[list[str]] = []
    real = decontaminate.decontaminated_pools
    monkeypatch.setattr(decontaminate, "decontaminated_pools", lambda train, held, n, quiet=False, where=None:
                        pools.append(sorted(train)) or real(train, held, n, quiet, where))
    train = jsonl(tmp_path / "train.jsonl", ["Name a prime number below ten.", "Name two primes."])
    held = jsonl(tmp_path / "held.jsonl", HELD)
    assert main(["sweep", str(spec_file(tmp_path, train, held)), "--validate-only"]) == 0, capsys.readouterr().err
    assert sorted(reads) == [(str(held), "eval"), (str(train), "train")]
    assert pools == [["arith_r1", "mine"]]  # the world's records generated, once for both arms


def test_a_file_it_empties_beside_a_generated_world_is_still_refused(tmp_path, reads, capsys):
    held = jsonl(tmp_path / "held.jsonl", HELD)
    assert main(["sweep", str(spec_file(tmp_path, held, held)), "--validate-only"]) == 2
    err = capsys.readouterr().err
    assert "data.decontaminate_ngram=9: all 3 training records of source 'mine'" in err, err
    assert "no trial was started" in err and sorted(reads) == [(str(held), "eval"), (str(held), "train")]
