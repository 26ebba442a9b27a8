"""Values W&B or Lightning refuse only once a run has started (after its run directory, or in every trial of a
sweep): a ``team/project`` W&B project, a misspelt precision, ``trainer.devices=-1`` on a CPU. They stop at
compose (so ``--dry-run`` and ``sweep --validate-only`` too), or before anything is written, naming the key."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from klear_lab.cli import main
from klear_lab.config.checks import PRECISIONS
from klear_lab.config.compose import compose
from klear_lab.errors import ConfigError

SFT = Path(__file__).resolve().parents[3] / "experiments/quickstart/sft.yaml"


@pytest.mark.parametrize(("override", "said"), [
    ("tracking.wandb.project=team/klear", "tracking.wandb.project 'team/klear' may not contain '/'"),
    ("tracking.wandb.project=my:proj", "may not contain ':'"),
    (f"tracking.wandb.project={'p' * 129}", "is 129 characters, W&B allows 128"),
    ("tracking.wandb.project=''", "tracking.wandb.project '' is empty: name the project"),  # W&B takes it offline
    ("tracking.wandb.project='  '", "tracking.wandb.project '  ' is empty"),
    ("tracking.wandb.project='a\tb'", r"may not contain '\\t'"),
    ("trainer.precision=bf16-mixedd", "trainer.precision must be one of"),
])
def test_refused_at_compose_naming_the_key(override, said):
    with pytest.raises(ConfigError, match=said):
        compose(SFT, [override])


def test_the_dry_run_refuses_them_and_nothing_is_written(tmp_path, capsys):
    runs = tmp_path / "runs"
    assert main(["train", str(SFT), f"run.out_dir={runs}", "tracking.wandb.project=team/klear", "--dry-run"]) == 2
    assert "a team or user goes in tracking.wandb.entity" in capsys.readouterr().err
    assert main(["train", str(SFT), f"run.out_dir={runs}", "trainer.devices=-1"]) == 2  # a TypeError traceback, exit 1
    assert "trainer.devices=-1" in capsys.readouterr().err and not runs.exists()


def test_the_precisions_are_lightnings():
    from lightning.fabric.connector import _PRECISION_INPUT_STR, _PRECISION_INPUT_STR_ALIAS

    assert set(PRECISIONS) == {*typing.get_args(_PRECISION_INPUT_STR), *typing.get_args(_PRECISION_INPUT_STR_ALIAS)}
    for ok in ("bf16-mixed", "32-true", "16-mixed"):
        compose(SFT, [f"trainer.precision={ok}"])


def test_a_data_file_given_as_a_source_name_is_blamed_on_its_layer_with_the_form_to_use(tmp_path):
    """``data.sources: [data/good.jsonl]`` in a file named the base experiment (whose sources it replaced) and
    only listed the registered sources."""
    mine = tmp_path / "mine.yaml"
    mine.write_text(f"base: {SFT}\ndata:\n  sources:\n    - data/good.jsonl\n")
    with pytest.raises(ConfigError, match=rf"^{mine}: data.sources.0.name: unknown source 'data/good.jsonl'; .*"
                                          r"a data file is a source of its own: \{name: file, path: data/good.jsonl\}"):
        compose(mine)
    with pytest.raises(ConfigError, match=r"^command line: data.sources.0.name: unknown source"):
        compose(SFT, ["data.sources=[data/good.jsonl]"])


def test_an_empty_spec_is_told_what_a_spec_holds(tmp_path, capsys):
    from klear_lab.cli_sweep import main as sweep_main

    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert sweep_main(["sweep", str(empty), "--validate-only"]) == 2
    assert "the file is empty (a sweep spec names at least its `experiment:`" in capsys.readouterr().err
    assert main(["reproduce", str(empty)]) == 2
    assert "the file is empty (an analysis spec names its `title:`" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="an experiment names at least its `base:`"):
        compose(empty)


def test_a_project_name_with_a_non_breaking_space_is_taken():
    """Only control characters are refused: ``isprintable`` refused a non-breaking space too (a red team)."""
    assert compose(SFT, ["tracking.wandb.project='klear\u00a0lab'"])["tracking"]["wandb"]["project"] == "klear\u00a0lab"
