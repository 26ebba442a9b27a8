"""What a resume refuses to continue, from the command line and from ``run_experiment(cfg, resume=...)``: a
completed run, another config or seed, edited data, a run another resume holds. And how a stopped run is found
again: a sweep's fresh ``model.init_from`` config is the run's, and the same command run again names it."""

from __future__ import annotations

import json

import pytest
import yaml
from resume_helpers import RL, SFT, Crash

from klear_lab.cli import main
from klear_lab.config.compose import compose
from klear_lab.errors import ConfigError
from klear_lab.resume import resumable_twins
from klear_lab.run import run_experiment


def test_resume_refuses_what_it_cannot_continue(tmp_path, tiny_sft_overrides, capsys):
    done = run_experiment(compose(SFT, tiny_sft_overrides))
    assert main(["resume", str(done.run_dir)]) == 2
    assert "already completed" in capsys.readouterr().err

    record = json.loads((done.run_dir / "run.json").read_text())
    (done.run_dir / "run.json").write_text(json.dumps({**record, "status": "failed"}))
    assert main(["resume", str(done.run_dir)]) == 2  # trainer.checkpoint=false in these overrides
    assert "no checkpoint to resume from" in capsys.readouterr().err
    assert main(["resume", str(done.run_dir), "optim.lr=0.1"]) == 2  # changes what the run computes
    assert "'optim.lr=0.1': a resumed run keeps its config; only trainer.num_threads" in capsys.readouterr().err
    assert main(["resume", str(done.run_dir), "sft.max_stepz=3"]) == 2  # was: "start a new run: klear-lab train ..."
    err = capsys.readouterr().err
    assert "sft.max_stepz" in err and "did you mean 'sft.max_steps'" in err and "klear-lab train" not in err

    assert main(["resume", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_the_api_resume_checks_what_the_cli_checks(tmp_path, tiny_sft_overrides, capsys):
    """``run_experiment(cfg, resume=DIR)`` trained the old checkpoint under any cfg and rewrote its config.yaml."""
    from klear_lab.errors import ConfigError

    overrides = [o for o in tiny_sft_overrides if not o.startswith("trainer.checkpoint")]
    overrides += ["trainer.checkpoint_every=2", "sft.max_steps=4"]
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_experiment(compose(SFT, overrides), callbacks=[Crash(3, lambda t: t.global_step)])
    (run_dir,) = (tmp_path / "runs").glob("*/")
    saved = (run_dir / "config.yaml").read_bytes()
    lr = compose(SFT, overrides)["optim"]["lr"]
    for change, needle in [("optim.lr=0.1", rf"hashes to .*\(changed since it started: optim\.lr: {lr} -> 0\.1\)"),
                           ("run.seed=7", "run.seed=0")]:
        with pytest.raises(ConfigError, match=needle):
            run_experiment(compose(SFT, [*overrides, change]), resume=run_dir)
    assert (run_dir / "config.yaml").read_bytes() == saved
    edited = yaml.safe_load(saved)  # a hand edit of the saved config: the key is named, not just two hashes
    edited["sft"]["max_steps"], edited["optim"]["grad_clip"] = 5, 0.5
    (run_dir / "config.yaml").write_text(yaml.safe_dump(edited))
    assert main(["resume", str(run_dir)]) == 2
    assert "(changed since it started: optim.grad_clip: 1.0 -> 0.5; sft.max_steps: 4 -> 5)" in capsys.readouterr().err
    (run_dir / "config.yaml").write_bytes(saved)
    done = run_experiment(compose(SFT, overrides), resume=run_dir)  # the same config continues
    assert json.loads((done.run_dir / "run.json").read_text())["status"] == "completed"
    with pytest.raises(ConfigError, match="already completed"):
        run_experiment(compose(SFT, overrides), resume=run_dir)
    with pytest.raises(ConfigError, match="typo: no such directory"):
        run_experiment(compose(SFT, overrides), resume=tmp_path / "typo")


def test_a_resume_on_edited_data_is_refused(tmp_path, tiny_sft_overrides):
    """The config names a data file, not its contents: an edited file resumed the run on other records
    under the same config hash. ``run.json`` keeps the records' digests; the original file resumes."""
    from klear_lab import builders
    from klear_lab.errors import ConfigError

    records, _ = builders.build_train_records(compose(SFT, tiny_sft_overrides))
    data = tmp_path / "sft.jsonl"
    original = "".join(json.dumps(r.to_dict()) + "\n" for r in records)
    data.write_text(original)
    overrides = [o for o in tiny_sft_overrides if not o.startswith("trainer.checkpoint")]
    overrides += ["trainer.checkpoint_every=2", "sft.max_steps=4", f"data.sources=[{{name: file, path: {data}}}]"]
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_experiment(compose(SFT, overrides), callbacks=[Crash(3, lambda t: t.global_step)])
    (run_dir,) = (tmp_path / "runs").glob("*/")
    started = json.loads((run_dir / "run.json").read_text())["data"]
    assert set(started) == {"train", "eval"}

    lines = original.splitlines(keepends=True)
    edited = {**json.loads(lines[7]), "response": json.loads(lines[7])["response"] + " "}
    data.write_text("".join(lines[:7]) + json.dumps(edited) + "\n" + "".join(lines[8:]))
    kept = {name: (run_dir / name).read_bytes() for name in ("run.json", "config.yaml", "csv/metrics.csv")}
    with pytest.raises(ConfigError, match=rf"data.sources: {started['train']} at the start, [0-9a-f]{{16}} now"):
        run_experiment(compose(SFT, overrides), resume=run_dir)
    assert {name: (run_dir / name).read_bytes() for name in kept} == kept  # refused before anything is written
    # a sweep's retry of the killed trial starts it over in a new run (else every rerun picked it, and was refused)
    from klear_lab.sweep.spec import DEFAULT_RUNNER
    from klear_lab.sweep.trial import run_or_start_over

    fresh = run_or_start_over({"runner": DEFAULT_RUNNER, "resume": str(run_dir)}, compose(SFT, overrides), [])
    fresh_data = json.loads((fresh.run_dir / "run.json").read_text())["data"]
    assert fresh.run_dir != run_dir and fresh_data["train"] != started["train"]

    data.write_text(original)
    done = run_experiment(compose(SFT, overrides), resume=run_dir)
    record = json.loads((done.run_dir / "run.json").read_text())
    assert record["status"] == "completed" and record["data"] == started


def test_a_fresh_init_from_config_is_the_run_that_resolved_it(tmp_path):
    """An RL trial with model.init_from saved the parent's run as model.name_or_path, so its sweep retry (a fresh
    config) never matched the killed run's hash and started over."""
    from klear_lab.resume import as_resolved
    from klear_lab.tracking import config_hash

    fresh = compose(RL, [f"run.out_dir={tmp_path}"])
    assert fresh["model"]["init_from"] and not fresh["model"]["name_or_path"]
    started = {**fresh, "model": {**fresh["model"], "name_or_path": str(tmp_path / "parent-run")}}
    assert config_hash(fresh) != config_hash(started)
    assert config_hash(as_resolved(fresh, started["model"])) == config_hash(started)
    other = {**started["model"], "init_from": str(tmp_path / "other.yaml")}
    assert config_hash(as_resolved(fresh, other)) != config_hash(started)


def test_a_second_resume_of_one_run_is_refused_while_the_first_holds_it(tmp_path, tiny_sft_overrides):
    """Two resumes started while the first was still building its run (run.json not yet "running") both
    passed the checks and wrote one run's CSV, checkpoint and W&B id."""
    import fcntl

    from klear_lab.errors import ConfigError

    overrides = [o for o in tiny_sft_overrides if not o.startswith("trainer.checkpoint")]
    overrides += ["trainer.checkpoint_every=2", "sft.max_steps=4"]
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_experiment(compose(SFT, overrides), callbacks=[Crash(3, lambda t: t.global_step)])
    (run_dir,) = (tmp_path / "runs").glob("*/")
    with open(run_dir / ".lock", "w") as held:  # what a resume in another process holds
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(ConfigError, match="another process is resuming this run"):
            run_experiment(compose(SFT, overrides), resume=run_dir)
    assert run_experiment(compose(SFT, overrides), resume=run_dir).metrics["train/steps"] == 4  # released


def test_running_a_stopped_runs_command_again_names_the_run_to_resume(tmp_path, tiny_sft_overrides, capsys):
    """The same command after a Ctrl-C or crash started over in a new directory without a word (found by a
    new-user walkthrough); it still starts over, and says which run `klear-lab resume` would continue."""
    overrides = [*tiny_sft_overrides, "trainer.checkpoint=true", "trainer.checkpoint_every=1", "sft.max_steps=4"]
    steps = lambda t: t.global_step  # noqa: E731
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_experiment(compose(SFT, overrides), callbacks=[Crash(2, steps)])
    (stopped,) = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]
    assert "note:" not in capsys.readouterr().err
    assert not resumable_twins(compose(SFT, [*overrides, "sft.max_steps=3"]))  # another config: not its run
    from klear_lab.stages.eval import eval_config

    with pytest.raises(ConfigError, match=rf"only a completed run has a final model to score \(`klear-lab resume "
                                          rf"{stopped}` continues it\)"):
        eval_config(stopped)  # it can resume: the refusal says how
    _dry_run_says_so(stopped, overrides, capsys)
    again = run_experiment(compose(SFT, overrides))
    err = capsys.readouterr().err
    assert f"note: {stopped} is an earlier run of this config and seed" in err and f"klear-lab resume {stopped}" in err
    assert again.run_dir != stopped and again.metrics["train/steps"] == 4


def _dry_run_says_so(stopped, overrides, capsys) -> None:
    """``--dry-run`` gives the same note as a row, and is titled with the file given (a saved config here, whose
    experiment is another file)."""
    from klear_lab.dry_run import dry_run

    rows = dry_run(compose(SFT, overrides))
    assert ("earlier run", f"{stopped} stopped at a checkpoint: `klear-lab resume {stopped}` continues it (this run "
            "starts over)") in rows
    capsys.readouterr()
    assert main(["train", str(stopped / "config.yaml"), "--dry-run"]) == 0
    out = "".join(capsys.readouterr().out.split())  # Rich wraps the title: compared without spaces (paths have none)
    assert f"dryrun:{stopped / 'config.yaml'}(metadevice" in out
