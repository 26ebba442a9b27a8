"""``klear-lab config RUN_A --diff RUN_B`` of two runs of one config that read other records (a prompt of the
training file edited between them) said "no differences: the same config"; ``run.json``'s data digests, kept
"so two runs can be checked to have read the same records", were not looked at (a user walkthrough)."""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from klear_lab.cli import main
from klear_lab.config.compose import compose
from klear_lab.config.yaml_io import dump_yaml

ROOT = Path(__file__).resolve().parents[2]
SFT = ROOT / "experiments/quickstart/sft.yaml"
TRAIN_A, TRAIN_B, EVAL = "4e9625" + "0" * 10, "11e03c" + "0" * 10, "6fa598" + "0" * 10


def _run(folder: Path, data: dict[str, str], overrides: tuple[str, ...] = ()) -> Path:
    """A run directory as a run leaves it, as far as ``config --diff`` reads it."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(dump_yaml(compose(SFT, [f"run.out_dir={folder.parent}", *overrides])))
    (folder / "run.json").write_text(json.dumps({"status": "completed", "data": data}))
    return folder


def _said(capsys) -> str:
    return " ".join(capsys.readouterr().out.split())


def test_two_runs_of_one_config_that_read_other_records_say_so(tmp_path, capsys):
    a = _run(tmp_path / "runs" / "a", {"train": TRAIN_A, "eval": EVAL})
    b = _run(tmp_path / "runs" / "b", {"train": TRAIN_B, "eval": EVAL})
    assert main(["config", str(a), "--diff", str(b / "config.yaml")]) == 0  # as for any difference
    said = _said(capsys)
    assert "no differences" not in said
    assert (f"the same config, but they read different records (run.json's data digests): data.train {TRAIN_A} "
            f"vs {TRAIN_B}") in said
    assert "data.eval" not in said  # the held-out records are the same


def test_records_are_named_after_the_table_when_the_configs_differ_too(tmp_path, capsys):
    a = _run(tmp_path / "runs" / "a", {"train": TRAIN_A, "eval": EVAL})
    b = _run(tmp_path / "runs" / "b", {"train": TRAIN_B, "eval": EVAL}, ("run.name=other",))
    assert main(["config", str(a), "--diff", str(b)]) == 0
    said = _said(capsys)
    assert "1 key(s) differ" in said
    assert said.index("run.name") < said.index(f"and they read different records (run.json's data digests): "
                                               f"data.train {TRAIN_A} vs {TRAIN_B}")


def test_two_seeds_are_not_said_to_read_other_records_for_their_training_draws(tmp_path, capsys):
    """The mix draws and shuffles by run.seed: two seeds of one arm always differ in data.train (a red team)."""
    a = _run(tmp_path / "runs" / "a", {"train": TRAIN_A, "eval": EVAL})
    b = _run(tmp_path / "runs" / "b", {"train": TRAIN_B, "eval": EVAL}, ("run.seed=3",))
    assert main(["config", str(a), "--diff", str(b)]) == 0
    assert "different records" not in _said(capsys)
    c = _run(tmp_path / "runs" / "c", {"train": TRAIN_B, "eval": "ab" * 8}, ("run.seed=3",))
    assert main(["config", str(a), "--diff", str(c)]) == 0
    assert f"data.eval {EVAL} vs {'ab' * 8}" in _said(capsys)


def test_the_same_records_an_experiment_or_overrides_say_nothing_of_records(tmp_path, capsys):
    a = _run(tmp_path / "runs" / "a", {"train": TRAIN_A, "eval": EVAL})
    same = _run(tmp_path / "runs" / "same", {"train": TRAIN_A, "eval": EVAL})
    b = _run(tmp_path / "runs" / "b", {"train": TRAIN_B, "eval": EVAL})
    old = _run(tmp_path / "runs" / "old", {})  # a run from before the digests
    for first, second in [(a, same), (a, old)]:
        assert main(["config", str(first), "--diff", str(second)]) == 0
        assert "no differences: the same config" in _said(capsys)
    experiment = tmp_path / "runs" / "exp.yaml"  # its records are not read: the whole corpus
    experiment.write_text((a / "config.yaml").read_text())
    assert main(["config", str(experiment), "--diff", str(b)]) == 0
    assert "different records" not in _said(capsys)
    assert main(["config", str(a), "run.name=other", "--diff", str(b)]) == 0  # A with overrides is not run A
    assert "different records" not in _said(capsys)
