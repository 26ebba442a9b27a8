"""``klear-lab train RUN/config.yaml`` from another directory: the relative data paths of the saved config read
other files there, in silence (same config hash, other records; found by a review). Now the rerun says where
the run started and that it reads other records than the run did, both before it trains."""

from __future__ import annotations

import json
from pathlib import Path

from klear_lab import run as run_mod
from klear_lab.cli import main

SFT = str(Path(__file__).resolve().parents[2] / "experiments/quickstart/sft.yaml")


def _eval_file(folder: Path, answers: range) -> None:
    (folder / "d").mkdir(parents=True)
    (folder / "d" / "ev.jsonl").write_text("".join(json.dumps({"prompt": f"{a - 1} + 1 = ?", "answer": str(a)}) + "\n"
                                                   for a in answers))


def test_a_rerun_elsewhere_says_where_the_run_started_and_that_its_records_differ(
        tmp_path, tiny_sft_overrides, monkeypatch, capsys):
    first_dir, other_dir = tmp_path / "a", tmp_path / "b"
    _eval_file(first_dir, range(1, 5))
    _eval_file(other_dir, range(10, 14))
    monkeypatch.chdir(first_dir)
    assert main(["train", SFT, *tiny_sft_overrides, "data.eval_sources=[{name: file, path: d/ev.jsonl}]"]) == 0
    (run,) = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]
    capsys.readouterr()
    monkeypatch.chdir(other_dir)
    said_before: list[str] = []  # what stderr held when the run started: the warnings come before training
    real = run_mod.run_experiment
    monkeypatch.setattr(run_mod, "run_experiment",
                        lambda cfg, **kw: said_before.append(capsys.readouterr().err) or real(cfg, **kw))
    assert main(["train", str(run / "config.yaml"), f"run.out_dir={tmp_path / 'again'}"]) == 0
    err = " ".join(said_before[0].split())
    assert f"warning: {run}: rerunning its saved config from {other_dir}; the run started in {first_dir}" in err
    assert f"rerunning {run / 'config.yaml'}, which reads other records than {run} did" in err, err
    assert "data.eval_sources: " in err and "data.sources" not in err, err  # the generated train set is alike
    monkeypatch.chdir(first_dir)  # where it started, on the same files: neither warning
    assert main(["train", str(run / "config.yaml"), f"run.out_dir={tmp_path / 'third'}"]) == 0
    err = capsys.readouterr().err
    assert "rerunning its saved config" not in err and "other records" not in err, err
    # another seed draws other records from the same files: no news (it warned of a data change on every such rerun)
    assert main(["train", str(run / "config.yaml"), f"run.out_dir={tmp_path / 'fourth'}", "run.seed=1"]) == 0
    assert "other records" not in capsys.readouterr().err
