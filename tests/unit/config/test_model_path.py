"""A mistyped run directory in model.name_or_path is said at once; a hub id is still a hub id."""

from __future__ import annotations

import pytest

from klear_lab.build_model import check_local_model
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
