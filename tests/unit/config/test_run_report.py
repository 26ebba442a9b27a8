"""What a finished run prints: paths whole in a pipe (Rich wrapped them at its width, splitting `wandb sync` from
its directory), and after a resume the upload command of every attempt's offline W&B directory (the last one
alone holds only the steps since the resume)."""

from __future__ import annotations

from pathlib import Path

from klear_lab.run import RunResult
from klear_lab.run_report import print_result, wandb_upload


def _result(run_dir: Path, wandb_dir: Path | None) -> RunResult:
    return RunResult(run_dir=run_dir, metrics={"val/acc": 0.5, "train/loss": 1.25}, wandb_dir=wandb_dir)


def test_every_path_is_on_one_line_in_a_pipe(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    run_dir = tmp_path / ("a-long-run-name-" * 8 + "s0")
    wandb_dir = run_dir / "wandb" / "offline-run-20261206_034045-abcdefgh"
    wandb_dir.mkdir(parents=True)
    print_result(_result(run_dir, wandb_dir))
    lines = capsys.readouterr().out.splitlines()
    assert f"run finished: {run_dir}" in lines
    (line,) = [x for x in lines if x.startswith("W&B run")]
    assert line.endswith(f"(offline: upload with `wandb sync {wandb_dir}`)"), lines
    assert f"resolved config: {run_dir / 'config.yaml'}" in lines


def test_after_a_resume_the_upload_command_takes_every_attempt_in_order(tmp_path):
    wandb = tmp_path / "run" / "wandb"
    first, last = wandb / "offline-run-20261206_034012-x", wandb / "offline-run-20261206_034045-x"
    first.mkdir(parents=True)
    assert wandb_upload(first).endswith(f"upload with `wandb sync {first}`)")
    last.mkdir()
    said = wandb_upload(last)
    assert said.startswith(str(last)) and "the last of 2 attempts of one W&B run" in said
    assert said.endswith(f"`wandb sync {wandb}/offline-run-*`)")


def test_an_online_run_is_named_without_an_upload_command(tmp_path):
    online = tmp_path / "wandb" / "run-20261206_034012-x"
    assert wandb_upload(online) == str(online)


def test_paths_inside_the_working_directory_are_shown_relative_to_it(tmp_path, capsys, monkeypatch):
    """As `train` prints the `runs/...` it was given: an `eval` of a run (its eval runs beside it, absolute) too."""
    from klear_lab.console import shown_path

    run_dir = tmp_path / "runs" / "sft-s0" / "evals" / "eval-s0"
    wandb_dir = run_dir / "wandb" / "offline-run-20261206_034045-x"
    wandb_dir.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    print_result(_result(run_dir, wandb_dir))
    lines = capsys.readouterr().out.splitlines()
    assert "run finished: runs/sft-s0/evals/eval-s0" in lines
    assert any(x.endswith("upload with `wandb sync runs/sft-s0/evals/eval-s0/wandb/offline-run-20261206_034045-x`)")
               for x in lines)
    monkeypatch.chdir(run_dir)
    assert shown_path(tmp_path / "elsewhere") == str(tmp_path / "elsewhere")  # outside it: whole
    assert shown_path(run_dir) == str(run_dir) and shown_path("runs/x") == "runs/x"
