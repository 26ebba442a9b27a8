"""A moved data file made a stopped run unresumable with no way on: ``klear-lab resume`` said only ``data file
../d/res.jsonl: no such file ...``, and a resume naming the new path is refused (a resumed run keeps its
config; a user walkthrough). The error now says how to go on: the file, or a symlink to it, back where the
config names it, relative to the directory the run started in; the resume checks its records as before."""

from __future__ import annotations

import json

import pytest
from resume_helpers import SFT, Crash

from klear_lab import builders
from klear_lab.cli import main
from klear_lab.config.compose import compose
from klear_lab.run import run_experiment


def _stopped_run(tmp_path, tiny_sft_overrides, monkeypatch):
    """A run started in ``tmp_path/w`` on ``../d/res.jsonl``, crashed after its checkpoint at step 2."""
    records, _ = builders.build_train_records(compose(SFT, tiny_sft_overrides))
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "res.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
    (tmp_path / "w").mkdir()
    monkeypatch.chdir(tmp_path / "w")
    overrides = [o for o in tiny_sft_overrides if not o.startswith("trainer.checkpoint")]
    overrides += ["trainer.accelerator=cpu", "trainer.checkpoint_every=2", "sft.max_steps=4",
                  "data.sources=[{name: file, path: ../d/res.jsonl}]"]
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_experiment(compose(SFT, overrides), callbacks=[Crash(3, lambda t: t.global_step)])
    (run_dir,) = (tmp_path / "runs").glob("*/")
    return run_dir


def test_a_resume_after_a_data_file_moved_says_how_to_go_on(tmp_path, tiny_sft_overrides, monkeypatch, capsys):
    run_dir = _stopped_run(tmp_path, tiny_sft_overrides, monkeypatch)
    started = json.loads((run_dir / "run.json").read_text())["data"]
    kept = (tmp_path / "d" / "res_moved.jsonl")
    (tmp_path / "d" / "res.jsonl").rename(kept)
    capsys.readouterr()
    assert main(["resume", str(run_dir)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (f"data.sources.0.path: data file ../d/res.jsonl: no such file under the working directory "
            f"{tmp_path / 'w'}. ") in err, err
    assert f"relative paths are read from the directory the run started in ({tmp_path / 'w'}, run.json's work_dir)" \
        in err, err
    assert f"a symlink to it (ln -s NEW_PATH OLD_PATH), back at {tmp_path / 'd' / 'res.jsonl'}" in err, err
    assert "checks that it holds the records the run started with" in err, err
    assert main(["resume", str(run_dir), "data.sources.0.path=../d/res_moved.jsonl"]) == 2  # the new path: refused,
    err = " ".join(capsys.readouterr().err.split())  # with the same way on
    assert "a resumed run keeps its config; only" in err, err
    assert "If the file was moved: a resumed run keeps its config, whose relative paths" in err, err
    assert f"back at {tmp_path / 'd' / 'res.jsonl'}" in err, err

    monkeypatch.chdir(tmp_path)  # from elsewhere, where the relative path leads nowhere either
    assert main(["resume", str(run_dir)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"(cd {tmp_path / 'w'} && klear-lab resume {run_dir.resolve()})" in err, err

    (tmp_path / "d" / "res.jsonl").symlink_to(kept)  # as the advice says: the run continues on its records
    assert main(["resume", str(run_dir)]) == 2  # still from the wrong directory: told where to resume from
    err = " ".join(capsys.readouterr().err.split())
    assert f"The run started in {tmp_path / 'w'} (run.json's work_dir), where its config's relative paths lead and " \
        f"the files are: resume from there (cd {tmp_path / 'w'} && " in err, err
    monkeypatch.chdir(tmp_path / "w")
    assert main(["resume", str(run_dir)]) == 0
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "completed" and record["data"] == started
