"""``klear-lab resume`` of a sweep's trial says what the sweep does with it, which depends on the trial: every
trial was told "continue the sweep, which resumes it from its checkpoint", a completed one and one without a
checkpoint too (found by a fresh-user review)."""

from __future__ import annotations

import json
from pathlib import Path

from klear_lab.cli import main
from klear_lab.run_list import list_runs

SWEEP_COMMAND = "klear-lab sweep sweeps/quickstart.yaml"
FROM_CHECKPOINT = "continue the sweep instead, which resumes it from its checkpoint"


def make_trial(sweep: Path, name: str, status: str, checkpoint: bool = False, **record) -> Path:
    """A trial's run directory as the sweep ``sweep`` (its ``sweep.json`` naming sweeps/quickstart.yaml) left it."""
    run = sweep / "runs" / name
    (run / "csv").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"status": status, "tags": ["kind:rl", "seed:0"],
                                              "config_hash": "abc", **record}))
    (run / "config.yaml").write_text(f"run: {{name: {name}, kind: rl, notes: sweep quick trial 3}}\n")
    if checkpoint:
        (run / "checkpoints").mkdir()
        (run / "checkpoints" / "last.ckpt").write_bytes(b"")
    (sweep / "sweep.json").write_text(json.dumps({"name": "quick", "spec": "sweeps/quickstart.yaml"}))
    return run


def resume_error(run: Path | str, capsys) -> str:
    assert main(["resume", str(run)]) == 2
    return capsys.readouterr().err


def test_a_completed_or_pruned_trial_has_nothing_to_resume(tmp_path, capsys):
    sweep = tmp_path / "sweep_runs" / "quick"
    done = make_trial(sweep, "quick-a-s0", "completed", checkpoint=True)
    err = resume_error(done, capsys)
    assert f"{done / 'run.json'}: the trial already completed; nothing to resume" in err
    assert "continue the sweep" not in err
    pruned = make_trial(sweep, "quick-b-s0", "pruned", checkpoint=True)  # the sweep counts it as finished
    err = resume_error(pruned, capsys)
    assert "the sweep's pruner stopped this trial" in err and "nothing to resume" in err
    assert "continue the sweep" not in err


def test_a_trial_without_a_checkpoint_is_trained_again_by_its_sweep(tmp_path, capsys):
    sweep = tmp_path / "sweep_runs" / "quick"
    run = make_trial(sweep, "quick-a-s0", "failed", error="RuntimeError: CUDA error: out of memory")
    err = resume_error(run, capsys)
    assert (f"{run}: a trial of a sweep: no checkpoint to resume from ({run / 'checkpoints' / 'last.ckpt'}): "
            f"rerunning the sweep trains it again from the start: {SWEEP_COMMAND}") in err
    assert FROM_CHECKPOINT not in err and "fix the config" not in err  # not an error a rerun repeats


def test_a_stopped_trial_with_a_checkpoint_is_resumed_by_its_sweep(tmp_path, capsys):
    run = make_trial(tmp_path / "sweep_runs" / "quick", "quick-a-s0", "failed", checkpoint=True,
                     error="KeyboardInterrupt")
    err = resume_error(run, capsys)
    assert f"{run}: a trial of a sweep: {FROM_CHECKPOINT}: {SWEEP_COMMAND}. Resumed here" in err


def test_a_diverged_trial_gets_the_advice_runs_gives(tmp_path, capsys):
    """The config comes first, worded as ``klear-lab runs`` words it (one function says it for both)."""
    from klear_lab.errors import DivergedError
    from klear_lab.run import error_line

    sweep = tmp_path / "sweep_runs" / "quick"
    diverged = error_line(DivergedError("training diverged: grad_norm is inf at step 7"))
    fix = "fix the config first (a lower optim.lr, say) in the sweep spec: a rerun of the sweep would likely repeat it"
    bare = make_trial(sweep, "quick-a-s0", "failed", error=diverged)
    kept = make_trial(sweep, "quick-b-s0", "failed", checkpoint=True, error=diverged)
    notes = {Path(r.run_dir).name: r.note for r in list_runs([sweep])}
    assert notes["quick-a-s0"] == notes["quick-b-s0"] == f"{diverged} -> sweep trial: {fix}"
    for run in (bare, kept):  # fixed, the sweep trains it anew: not "which resumes it from its checkpoint"
        err = resume_error(run, capsys)
        assert (f"{run}: a trial of a sweep, which failed with {diverged}: {fix}; then rerun the sweep: "
                f"{SWEEP_COMMAND}") in err
        assert FROM_CHECKPOINT not in err


def test_a_superseded_trial_has_nothing_to_resume(tmp_path, capsys):
    sweep = tmp_path / "sweep_runs" / "quick"
    error = "superseded: its trial's retry started over in /x/quick-a-s0-2 (trial 5)"
    run = make_trial(sweep, "quick-a-s0", "failed", error=error)
    err = resume_error(run, capsys)
    assert f"{run}: a trial of a sweep, {error}: nothing to resume" in err and "rerunning" not in err


def test_a_quoted_tilde_run_directory_is_the_home_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    run = make_trial(tmp_path / "sweep_runs" / "quick", "quick-a-s0", "completed")
    err = resume_error("~/sweep_runs/quick/runs/quick-a-s0", capsys)
    assert f"{run / 'run.json'}: the trial already completed" in err
    err = resume_error("~/nowhere", capsys)  # was "~/nowhere: no such directory"
    assert f"{tmp_path / 'nowhere'}: no such directory" in err


def test_a_trial_running_now_has_nothing_to_resume(tmp_path, capsys):
    """Told to "continue the sweep", a user would start a second sweep beside the one running the trial."""
    import os
    import socket

    from klear_lab.run_owner import process_start

    sweep = tmp_path / "sweep_runs" / "quick"
    here = {"pid": os.getpid(), "host": socket.gethostname(), "pid_start": process_start(os.getpid())}
    live = make_trial(sweep, "quick-a-s0", "running", checkpoint=True, **here)
    err = resume_error(live, capsys)
    assert f"a trial of a sweep, running now (pid {os.getpid()}): nothing to resume" in err
    assert "continue the sweep" not in err
    elsewhere = make_trial(sweep, "quick-b-s0", "running", checkpoint=True, pid=1, host="node-7")
    err = resume_error(elsewhere, capsys)
    assert "recorded as running on node-7, whose processes cannot be checked from here" in err
    gone = make_trial(sweep, "quick-c-s0", "running", checkpoint=True, pid=2**22 + 1, host=socket.gethostname(),
                      pid_start=1)  # a kill -9ed trial: stopped, resumed by its sweep
    assert FROM_CHECKPOINT in resume_error(gone, capsys)


def test_eval_of_a_stopped_trial_gives_what_resume_says_not_resume(tmp_path, capsys):
    """``klear-lab eval`` of a trial a SIGTERM stopped at a checkpoint said "`klear-lab resume RUN` continues
    it", which ``klear-lab resume`` refuses for a sweep's trial: eval names its sweep as resume does."""
    from klear_lab.sweep.trial import TERMINATED

    run = make_trial(tmp_path / "sweep_runs" / "quick", "quick-a-s0", "failed", checkpoint=True, error=TERMINATED)
    assert main(["eval", str(run)]) == 2
    err = capsys.readouterr().err
    assert (f"status is 'failed' ({TERMINATED}): only a completed run has a final model to score; {run}: a trial of "
            f"a sweep: {FROM_CHECKPOINT}: {SWEEP_COMMAND}") in err
    assert "klear-lab resume" not in err and "Resumed here" not in err  # why not to resume: not eval's business
    assert resume_error(run, capsys).count(f"{FROM_CHECKPOINT}: {SWEEP_COMMAND}.") == 1  # the same advice
