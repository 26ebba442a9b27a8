"""``klear-lab eval RUN`` of a run whose held-out file was edited since scored the edited file in silence: the
eval run's ``run.json`` recorded other ``data.eval`` digests than the run's, and its val/acc read as comparable
(a user walkthrough). Now it warns, as a rerun of a saved config on other records does, and still scores."""

from __future__ import annotations

import json
from pathlib import Path

from klear_lab.cli import main

SFT = str(Path(__file__).resolve().parents[2] / "experiments/quickstart/sft.yaml")


def _heldout(path: Path, answers: range) -> None:
    path.write_text("".join(json.dumps({"prompt": f"{a - 1} + 1 = ?", "answer": str(a)}) + "\n" for a in answers))


def _digest(run: Path) -> str:
    return json.loads((run / "run.json").read_text())["data"]["eval"]


def test_an_evaluation_on_an_edited_heldout_file_warns_and_scores(tmp_path, tiny_sft_overrides, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _heldout(tmp_path / "ev.jsonl", range(1, 5))
    assert main(["train", SFT, *tiny_sft_overrides, "trainer.accelerator=cpu",
                 "data.eval_sources=[{name: file, path: ev.jsonl}]"]) == 0
    (run,) = (tmp_path / "runs").glob("*-s0")
    capsys.readouterr()
    assert main(["eval", str(run)]) == 0  # the same file: no warning
    assert "held-out records" not in capsys.readouterr().err

    _heldout(tmp_path / "ev.jsonl", range(2, 6))  # edited since the run
    assert main(["eval", str(run)]) == 0  # warned, not refused
    err = " ".join(capsys.readouterr().err.split())
    evals = sorted((tmp_path / "runs").glob("*-eval-*"), key=lambda p: p.stat().st_mtime_ns)
    now = _digest(evals[-1])
    assert now != _digest(run)
    assert (f"warning: evaluating {run.resolve()} on other held-out records than it was evaluated on "
            f"(data.eval_sources: {_digest(run)} then, {now} now)") in err, err
    assert "not comparable with the run's" in err

    _heldout(tmp_path / "other.jsonl", range(20, 24))  # other held-out sets, given on purpose: no warning
    assert main(["eval", str(run), "data.eval_sources=[{name: file, path: other.jsonl}]"]) == 0
    assert "held-out records" not in capsys.readouterr().err
