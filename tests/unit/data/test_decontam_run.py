"""``data.decontaminate_ngram`` in a run: the builders drop the training records, build the held-out ones once,
and a config without the key keeps its hash."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from klear_lab import builders
from klear_lab.config.compose import compose
from klear_lab.errors import DataError
from klear_lab.tracking import config_hash, hashed_body

ROOT = Path(__file__).resolve().parents[3]
HELD = ["Let a, b and c be positive reals with abc = 1. Find the least value of a^2 + b^2 + c^2.",
        "A frog jumps along the number line from 0, one unit left or right at random on every jump."]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def sft_config(tmp_path: Path, n: int, train_prompts: list[str]) -> dict:
    rows = [{"prompt": p, "answer": "1", "response": "r"} for p in train_prompts]
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    held = write_jsonl(tmp_path / "held.jsonl", [{"prompt": p, "answer": "1"} for p in HELD])
    return compose(ROOT / "experiments/quickstart/sft.yaml", [
        f"data.sources=[{{name: file, path: {train}, format: records, label: mine}}]",
        f"data.eval_sources=[{{name: file, path: {held}, format: records, task: math, label: aime}}]",
        f"data.decontaminate_ngram={n}"])


TRAIN = ["Name a prime.", "Consider and c be positive reals with abc = 1. Find the greatest value of a.",
         "A frog jumps along the number line from 0 and stops at 3.", "Name two primes."]


@pytest.fixture
def eval_builds(monkeypatch) -> list[int]:
    """How many times the held-out records were built."""
    calls: list[int] = []
    build = builders.build_eval_records
    monkeypatch.setattr(builders, "build_eval_records", lambda cfg: calls.append(1) or build(cfg))
    return calls


def test_the_builder_drops_overlapping_records_and_builds_the_held_out_ones_once(tmp_path, eval_builds, capsys):
    records, stats, eval_records = builders.build_run_records(sft_config(tmp_path, 9, TRAIN))
    assert sorted(r.prompt for r in records) == [TRAIN[0], TRAIN[3]] and len(eval_records) == 2
    assert len(eval_builds) == 1
    assert stats["data/decontam_dropped"] == 2.0 and stats["data/decontam_dropped_from/mine"] == 2.0
    assert stats["data/records"] == 2.0 and stats["data/kept_frac/mine"] == 1.0  # the filter's share of the rest
    assert "data.decontaminate_ngram=9: dropped 2 of 4 training records" in capsys.readouterr().err
    assert builders.build_train_records(sft_config(tmp_path, 9, TRAIN)) == (records, stats)  # starting_point's call
    from klear_lab.sweep.metrics import is_logged

    assert all(is_logged(name, kind) for name in stats for kind in ("sft", "rl"))  # a sweep may use them


def test_only_rank_zero_and_not_a_check_of_another_run_prints_the_line(tmp_path, eval_builds, capsys, monkeypatch):
    cfg = sft_config(tmp_path, 9, TRAIN)
    _, said, _ = builders.build_run_records(cfg, quiet=True)  # records_digests' check of a starting point
    assert said["data/decontam_dropped"] == 2.0 and "dropped 2 of 4" not in capsys.readouterr().err
    monkeypatch.setenv("LOCAL_RANK", "1")  # a DDP rank Lightning started: rank 0 says it
    assert builders.build_run_records(cfg)[1] == said and "dropped 2 of 4" not in capsys.readouterr().err
    monkeypatch.setenv("LOCAL_RANK", "0")
    builders.build_run_records(cfg)
    assert "dropped 2 of 4" in capsys.readouterr().err


def test_off_it_keeps_every_record_and_the_data_stats_as_they_were(tmp_path, eval_builds, capsys):
    cfg = sft_config(tmp_path, 0, TRAIN)
    records, stats, _ = builders.build_run_records(cfg)
    assert sorted(r.prompt for r in records) == sorted(TRAIN) and len(eval_builds) == 1
    assert not [k for k in stats if "decontam" in k] and builders.build_train_records(cfg) == (records, stats)
    assert len(eval_builds) == 1 and "decontaminate" not in capsys.readouterr().err  # not built for training alone


@pytest.mark.parametrize("kind", ["sft", "rl"])
def test_a_run_trains_on_the_decontaminated_records_and_logs_the_count(tmp_path, kind, eval_builds):
    """Both stages build their records so, the held-out ones once; ``starting_point`` digests the same records
    (its check that a finished run trained on the data a config reads now)."""
    from klear_lab.stages.rl import prepare_rl
    from klear_lab.stages.sft import prepare_sft
    from klear_lab.starting_point import records_digests

    cfg = sft_config(tmp_path, 9, TRAIN)
    if kind == "rl":
        cfg = compose(ROOT / "experiments/quickstart/rl.yaml", [
            "model.init_from=null", "rl.prompts_per_step=2", "rl.minibatch_prompts=2",
            *(f"data.{key}={json.dumps(cfg['data'][key])}" for key in ("sources", "eval_sources")),
            "data.decontaminate_ngram=9"])
    stage = prepare_sft(cfg) if kind == "sft" else prepare_rl(cfg)
    try:
        stats = stage.plan if kind == "sft" else stage.data_stats
        assert stats["data/decontam_dropped"] == 2.0 and stats["data/records"] == 2.0 and len(eval_builds) == 1
        assert stage.data == records_digests(cfg)
    finally:
        stage.close()


def test_the_held_out_file_read_as_training_data_is_refused(tmp_path):
    """The overlap warning's case (a file listed as both, no eval_path) becomes an error: nothing would be left."""
    with pytest.raises(DataError, match=r"data.decontaminate_ngram=9: all 2 training records of source 'mine'"):
        builders.build_run_records(sft_config(tmp_path, 9, HELD))


@pytest.mark.parametrize("experiment", ["sft.yaml", "rl.yaml"])
def test_a_config_without_the_key_keeps_its_hash_and_setting_it_changes_it(experiment):
    cfg = compose(ROOT / "experiments/quickstart" / experiment)
    assert cfg["data"]["decontaminate_ngram"] == 0 and "decontaminate_ngram" not in hashed_body(cfg)["data"]
    older = copy.deepcopy(cfg)
    del older["data"]["decontaminate_ngram"]  # a run saved before the key existed
    assert config_hash(older) == config_hash(cfg)
    assert config_hash(compose(ROOT / "experiments/quickstart" / experiment, ["data.decontaminate_ngram=9"])) \
        != config_hash(cfg)


@pytest.mark.parametrize("experiment", ["sft/final.yaml", "sft/table4/top1.yaml", "sft/table2/easy_true.yaml",
                                        "rl/math.yaml", "rl/code.yaml"])
def test_the_paper_scale_configs_decontaminate_as_the_paper(experiment):
    assert compose(ROOT / "experiments/paper" / experiment)["data"]["decontaminate_ngram"] == 9


def test_the_key_is_described(capsys):
    from klear_lab.cli import main

    assert main(["config", str(ROOT / "experiments/quickstart/sft.yaml"), "--keys", "data.decontaminate_ngram"]) == 0
    assert "9-gram test-set overlap" in " ".join(capsys.readouterr().out.split())
