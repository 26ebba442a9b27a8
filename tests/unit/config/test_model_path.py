"""A mistyped run directory in model.name_or_path is said at once; a hub id is still a hub id; a directory
without a model is named with what it lacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from klear_lab.build_model import check_local_model, check_model_dir, resolve_model_dir
from klear_lab.errors import ConfigError


def test_a_mistyped_run_dir_is_refused_but_a_hub_id_under_a_local_org_folder_is_not(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "sft-abc").mkdir(parents=True)
    (tmp_path / "runs" / "sft-abc" / "run.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"'runs/sft-abd': no such directory .*did you mean runs/sft-abc\?"):
        check_local_model("runs/sft-abd", "runs/sft-abd")
    with pytest.raises(ConfigError, match="no such directory"):
        check_local_model("./models/x", "./models/x")
    (tmp_path / "Qwen" / "Qwen2.5-0.5B").mkdir(parents=True)  # huggingface-cli download --local-dir Qwen/...
    check_local_model("Qwen/Qwen3-0.6B", "Qwen/Qwen3-0.6B")  # the hub's to answer (a review found it refused)
    check_local_model("runs/sft-abc", "runs/sft-abc")


def test_a_directory_without_a_model_is_named_with_what_it_lacks(tmp_path, capsys):
    """An empty directory as model.name_or_path: the run said "install sentencepiece or tiktoken" (the
    tokenizer's guess), its dry run crashed in AutoConfig (exit 1)."""
    from klear_lab.build_model import build_tokenizer_and_model
    from klear_lab.cli import main
    from klear_lab.config.compose import compose

    empty = tmp_path / "model"
    empty.mkdir()
    sft = Path(__file__).resolve().parents[3] / "experiments/quickstart/sft.yaml"
    cfg = compose(sft, [f"model.name_or_path={empty}"])
    with pytest.raises(ConfigError, match=rf"'{empty}': the directory {empty} holds no config.json and no tokenizer "
                                          r"files; expected an HF model directory \(config.json"):
        build_tokenizer_and_model(cfg, [])
    assert main(["train", str(sft), f"model.name_or_path={empty}", "--dry-run"]) == 2
    assert f"the directory {empty} holds no config.json and no tokenizer files" in capsys.readouterr().err
    (empty / "tokenizer.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"holds no config.json; expected"):
        check_model_dir(str(empty), str(empty))
    (empty / "tokenizer.json").unlink()
    (empty / "config.json").write_text("{}")
    check_model_dir(str(empty), str(empty))  # a tokenizer of other files (qwen.tiktoken...): from_pretrained's to judge


def test_a_run_directory_without_its_final_model_says_so(tmp_path):
    run = tmp_path / "sft-abc"
    run.mkdir()
    (run / "run.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"holds no config.json and no tokenizer files \(a klear-lab run directory "
                                          r"without a final model/"):
        check_model_dir(str(run), resolve_model_dir(str(run)))
