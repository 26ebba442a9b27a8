"""``--dry-run``: memory in the dtype the config holds weights in, the ``init_from`` starting point,
and exit 2 when a row says the config is NOT SUPPORTED (not when something is unavailable here)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from klear_lab.cli import main
from klear_lab.config.compose import compose
from klear_lab.dry_run import init_from_rows, plan_rows

ROOT = Path(__file__).resolve().parents[3]
MATH = ROOT / "experiments/paper/rl/math.yaml"  # Qwen3-8B, model.dtype bfloat16, trainer.precision bf16-true
QUICK_RL = ROOT / "experiments/quickstart/rl.yaml"
PARAMS = 8_190_735_360  # Qwen3-8B on the meta device: 15.3 GiB in bf16, 30.5 in fp32


@pytest.mark.parametrize(("overrides", "expected"), [
    ([], "61.0 GiB in bf16 (trainer.precision=bf16-true; AdamW rounds stochastically), before sharding"),
    (["optim.bf16_rounding=nearest"], "61.0 GiB in bf16 (trainer.precision=bf16-true; AdamW rounds to nearest: "
                                      "a step under half a weight's bf16 spacing is lost), before sharding"),
    (["trainer.precision=bf16-mixed", "model.dtype=float32"],
     "122.1 GiB in fp32 (model.dtype=float32; bf16-mixed computes under autocast), before sharding"),
    (["trainer.precision=32-true"],  # not converted
     "61.0 GiB in bf16 (model.dtype=bfloat16; AdamW rounds stochastically), before sharding"),
])
def test_training_memory_follows_the_precision(overrides, expected):
    rows = dict(plan_rows(compose(MATH, overrides), PARAMS))
    assert rows["weights+grads+AdamW"] == expected


def test_inference_weights_are_counted_in_model_dtype():
    cfg = compose(MATH)
    cfg["run"]["kind"] = "eval"
    assert dict(plan_rows(cfg, PARAMS))["weights (inference)"] == "15.3 GiB in bf16 (model.dtype=bfloat16), one device"


def test_an_sft_plan_names_its_data_mix_and_filter():
    """The RL plan named its clip and reward; the SFT one neither the mix nor the filter a sweep arm varies."""
    cfg = compose(ROOT / "experiments/quickstart/sft.yaml", ["data.mix=top_k", "data.mix.k=1", "data.mix.budget=500",
                                                             "data.filter=correct_only"])
    rows = dict(plan_rows(cfg, 1_000_000))
    assert rows["data mix / filter"] == "top_k / correct_only"
    assert rows["examples (declared, before data.filter)"] == "500"


def test_the_plan_says_init_from_trains_its_parent_first_and_trains_nothing(tmp_path):
    from klear_lab.starting_point import parent_config
    from klear_lab.tracking import config_hash

    runs = tmp_path / "runs"
    cfg = compose(QUICK_RL, [f"run.out_dir={runs}"])
    ((key, value),) = init_from_rows(cfg)
    assert key == "starting point (model.init_from)"
    assert "experiments/quickstart/sft.yaml: no completed run" in value and "first TRAINS IT, a whole sft run" in value
    assert not runs.exists()  # looked up only
    done = runs / "quickstart-sft-1"  # what a finished parent leaves: found by config hash and seed
    (done / "model").mkdir(parents=True)
    (done / "model" / "config.json").write_text("{}")
    (done / "config.yaml").write_text("run: {seed: 0}\n")
    (done / "run.json").write_text(json.dumps({"status": "completed", "config_hash": config_hash(parent_config(cfg))}))
    assert init_from_rows(cfg) == [(key, f"experiments/quickstart/sft.yaml: its completed run {done}")]
    assert init_from_rows(compose(QUICK_RL, [f"model.name_or_path={done}"])) == []  # a model given: no parent


def test_a_parent_that_trains_on_several_devices_is_not_trained_by_the_run(tmp_path, capsys):
    """resolve_init_from refuses to train such a parent (its DDP launcher would re-run this command)."""
    (tmp_path / "sft.yaml").write_text(f"base: {ROOT / 'experiments/quickstart/sft.yaml'}\n"
                                       "trainer: {devices: 2, strategy: ddp}\n")
    (tmp_path / "rl.yaml").write_text(f"base: {QUICK_RL}\nmodel: {{init_from: sft.yaml}}\n")
    assert main(["train", str(tmp_path / "rl.yaml"), f"run.out_dir={tmp_path / 'runs'}", "--dry-run"]) == 2
    assert "starting point (model.init_from): NOT SUPPORTED:" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_a_not_supported_row_fails_the_dry_run_after_the_plan(tmp_path, capsys):
    args = [str(QUICK_RL), f"run.out_dir={tmp_path}", "trainer.devices=2", "trainer.strategy=fsdp", "--dry-run"]
    assert main(["train", *args]) == 2
    out, err = capsys.readouterr()
    assert "NOT SUPPORTED: trainer.strategy='fsdp'" in out  # the plan is printed first
    assert "training devices: NOT SUPPORTED: trainer.strategy='fsdp'" in err


@pytest.mark.parametrize("experiment", ["sft.yaml", "rl.yaml"])
def test_an_empty_source_list_fails_the_dry_run_as_the_run(experiment, capsys):
    """``data.sources=[]`` printed a plan; the run then stopped on "no training records ()"."""
    assert main(["train", str(ROOT / "experiments/quickstart" / experiment), "data.sources=[]", "--dry-run"]) == 2
    out, err = capsys.readouterr()
    assert "dry run" not in out and "()" not in err
    assert "data.sources is empty: an " in err and "list at least one source" in err
    assert "(data.sources from command line)" in err


def test_an_engine_missing_here_is_no_failure(capsys):
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here: nothing is unavailable")
    assert main(["train", str(MATH), "--dry-run"]) == 0  # a GPU config checked on a laptop
    assert "NOT AVAILABLE HERE" in capsys.readouterr().out


def test_an_evaluation_engine_on_every_rank_is_not_supported(capsys):
    """eval_engine refuses several devices (every rank would start an engine) before it checks the package."""
    sft = str(ROOT / "experiments/quickstart/sft.yaml")
    assert main(["train", sft, "eval.engine=rollout", "rl.rollout=vllm", "trainer.devices=2", "trainer.strategy=ddp",
                 "--dry-run"]) == 2
    assert "NOT SUPPORTED: eval.engine: rollout with 'vllm' on several devices" in capsys.readouterr().err


def test_data_files_missing_here_are_named_in_the_plan(tmp_path, capsys, monkeypatch):
    """The dry run said nothing of absent data files: every run of the config then failed at load."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "here.jsonl").write_text('{"prompt": "p", "answer": "1"}\n')
    sources = ("data.sources=[{name: file, path: here.jsonl, format: records, task: math}, "
               "{name: file, path: data/absent.parquet, format: verl, task: math}]")
    assert main(["train", str(QUICK_RL), sources, "--dry-run"]) == 0  # the config may be meant for another machine
    out = capsys.readouterr().out.replace("\n", " ")
    assert "data.sources.1.path" in out and "data/absent.parquet: no such file" in " ".join(out.split())
    assert "here.jsonl" not in out and "data.sources.0" not in out


def test_a_training_file_of_task_auto_is_said_to_be_unchecked_against_the_reward(tmp_path, capsys, monkeypatch):
    """The dry run passed `rl.reward=code` on a math file without a word, as if checked: it reads no data, so
    the task of a `task: auto` file is unknown to it (the run refuses it at its start)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rl.jsonl").write_text('{"prompt": "What is 1+1?", "answer": "2"}\n')
    sources = "data.sources=[{name: file, path: rl.jsonl}]"
    assert main(["train", str(QUICK_RL), "model.init_from=null", sources, "rl.reward=code", "--dry-run"]) == 0
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "rl.reward tasks not checked for data.sources.0: task auto, and the dry run reads no data" in out
    assert main(["train", str(QUICK_RL), "model.init_from=null", sources.replace("}]", ", task: math}]"),
                 "rl.reward=code", "--dry-run"]) == 2  # a declared task is checked
    assert "NOT SUPPORTED" in capsys.readouterr().out


def test_init_from_that_name_or_path_overrides_is_warned_about(tmp_path, capsys):
    """An RL run given model.name_or_path trained from it and said nothing of the model.init_from it ignored."""
    from klear_lab.starting_point import parent_config, resolve_init_from
    from klear_lab.tracking import config_hash

    other = tmp_path / "other"
    (other / "model").mkdir(parents=True)
    cfg = compose(QUICK_RL, [f"model.name_or_path={other}", f"run.out_dir={tmp_path}"])
    resolve_init_from(cfg)
    assert f"model.init_from ({cfg['model']['init_from']}) is not used" in capsys.readouterr().err
    from klear_lab.dry_run import init_from_rows

    assert init_from_rows(cfg) == []  # the dry run says it too (it said nothing)
    assert f"model.init_from ({cfg['model']['init_from']}) is not used" in capsys.readouterr().err
    (other / "run.json").write_text(json.dumps({"config_hash": config_hash(parent_config(cfg))}))
    resolve_init_from(cfg)  # a run of init_from: what a run's saved config holds
    assert capsys.readouterr().err == ""
    assert cfg["model"]["name_or_path"] == str(other)
    gone = compose(QUICK_RL, [f"model.name_or_path={tmp_path / 'deleted' / 'model'}", f"run.out_dir={tmp_path}"])
    resolve_init_from(gone)  # a saved config's starting point deleted since: the model's own error says that
    assert "is not used" not in capsys.readouterr().err


def test_an_eval_run_is_not_held_to_its_training_data(tmp_path):
    """An eval reads only data.eval_sources: a missing training file made a false NOT AVAILABLE HERE row."""
    from klear_lab.builders import unavailable_data

    missing = f"data.sources=[{{name: file, path: {tmp_path / 'train.jsonl'}, format: records}}]"
    assert unavailable_data(compose(QUICK_RL, [missing]))  # a training run reads it
    assert unavailable_data(compose(QUICK_RL, [missing, "run.kind=eval", "model.init_from=null",
                                               f"model.name_or_path={tmp_path}"])) == []


def test_the_plan_warns_of_a_warmup_as_long_as_the_run():
    """The run warned that no cosine phase would run; its dry run did not (a new-user walkthrough)."""
    sft = ROOT / "experiments/quickstart/sft.yaml"
    rows = dict(plan_rows(compose(sft, ["sft.max_steps=3"]), 1))
    assert rows["warning"].startswith("optim.warmup_steps=30 is not below the run's 3 scheduled steps")
    assert "warning" not in dict(plan_rows(compose(sft, ["sft.max_steps=300"]), 1))
    rl = dict(plan_rows(compose(QUICK_RL, ["rl.steps=1"]), 1))  # 4 updates a step: 4 scheduled, warmup 5
    assert rl["warning"].startswith("optim.warmup_steps=5 is not below the run's 4 scheduled steps")
    assert "warning" not in dict(plan_rows(compose(QUICK_RL), 1))


def test_a_hub_model_missing_from_the_cache_offline_is_marked_not_available(tmp_path, monkeypatch):
    """The paper plan marked its data and vLLM NOT AVAILABLE HERE, but not a checkpoint the run could not load."""
    import huggingface_hub.constants

    from klear_lab.errors import OFFLINE_VARS

    for var in OFFLINE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    cfg = compose(MATH)
    name = cfg["model"]["name_or_path"]
    assert dict(plan_rows(cfg, PARAMS))["model"] == (
        f"{name} (NOT AVAILABLE HERE: HF_HUB_OFFLINE is set and {name} is not in the hub cache ({tmp_path / 'hub'}))")
    repo = tmp_path / "hub" / f"models--{name.replace('/', '--')}"  # the hub client's own cache layout
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    (repo / "snapshots" / ("0" * 40)).mkdir(parents=True)
    (repo / "snapshots" / ("0" * 40) / "config.json").write_text("{}")
    assert dict(plan_rows(cfg, PARAMS))["model"] == name
    monkeypatch.delenv("HF_HUB_OFFLINE")
    shutil.rmtree(repo)
    assert dict(plan_rows(cfg, PARAMS))["model"] == name  # online, the run downloads it



def plan_table(out: str) -> dict[str, str]:
    """The printed plan's rows, item -> value (a wrapped value's lines joined)."""
    rows: dict[str, str] = {}
    key = ""
    for line in out.splitlines():
        if line.startswith("│"):
            item, value = (c.strip() for c in line.strip().strip("│").split("│"))
            key = item or key
            rows[key] = f"{rows.get(key, '')} {value}".strip()
    return rows


@pytest.mark.parametrize(("experiment", "overrides", "key", "expected"), [
    ("sft.yaml", [], "lr schedule", "warmup 30 -> 0.003 cosine -> 0.0001"),
    # the plan said "cosine -> 0.0001" whatever the schedule
    ("sft.yaml", ["optim.schedule=constant"], "lr schedule", "warmup 30 -> 0.003 constant"),
    ("rl.yaml", [], "lr", "warmup 5 -> 3e-05 cosine -> 3e-06 (the schedule counts: update)"),
    ("rl.yaml", ["optim.schedule=constant"], "lr", "warmup 5 -> 3e-05 constant (the schedule counts: update)"),
])
def test_the_plan_prints_the_configured_lr_schedule(experiment, overrides, key, expected, capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)  # a wide table: one line per row
    assert main(["train", str(ROOT / "experiments/quickstart" / experiment), "--dry-run", *overrides]) == 0
    assert plan_table(capsys.readouterr().out)[key] == expected
