"""``klear-lab runs``: a run's status is what ``run.json`` records, checked against live processes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from klear_lab.cli import main
from klear_lab.run_list import list_runs
from klear_lab.run_owner import process_start


def make_run(parent: Path, name: str, status: str, kind: str = "rl", **extra) -> Path:
    run_dir = parent / name
    (run_dir / "csv").mkdir(parents=True)
    record = {"status": status, "tags": [f"kind:{kind}", "seed:0"], **extra}
    (run_dir / "run.json").write_text(json.dumps(record))
    (run_dir / "config.yaml").write_text(f"run:\n  name: {name}\n")  # a resume or rerun needs it
    rows = "step,train/loss,val/acc\n0,1.5,\n1,1.2,0.25\n2,1.0,\n3,0.9,\n4,0."  # a kill cut the last row: 4 steps done
    (run_dir / "csv" / "metrics.csv").write_text(rows)
    return run_dir


@pytest.fixture
def live_klear_process():
    """A real process whose command line names klear (what a run's writer looks like)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "klear-lab"])
    yield proc.pid
    proc.kill()
    proc.wait()


def test_statuses_from_the_record_and_the_processes(tmp_path, live_klear_process):
    runs, host = tmp_path / "runs", socket.gethostname()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    make_run(runs, "a-done", "completed")
    (runs / "a-done" / "summary.json").write_text(json.dumps({"val/acc": 0.75}))
    make_run(runs, "b-live", "running", pid=live_klear_process, host=host)
    stopped = make_run(runs, "c-killed", "running", pid=int(dead.stdout), host=host)
    (stopped / "checkpoints").mkdir()
    (stopped / "checkpoints" / "last.ckpt").write_bytes(b"")
    make_run(runs, "d-crashed", "failed", error="ValueError: bad batch")
    make_run(runs, "e-elsewhere", "running", pid=1, host=host + "-other")
    started = process_start(live_klear_process)
    make_run(runs, "g-live-since", "running", pid=live_klear_process, host=host, pid_start=started)
    make_run(runs, "h-pid-reused", "running", pid=live_klear_process, host=host, pid_start=started - 1)
    (runs / "f-broken").mkdir()
    (runs / "f-broken" / "run.json").write_text('{"status": "runn')  # not what run_experiment writes
    rows = {Path(r.run_dir).name: r for r in list_runs([runs])}
    assert {name: r.status for name, r in rows.items()} == {
        "a-done": "completed", "b-live": "running", "c-killed": "stopped", "d-crashed": "failed",
        "e-elsewhere": "unknown", "f-broken": "unknown", "g-live-since": "running", "h-pid-reused": "stopped"}
    assert rows["a-done"].metric == 0.75 and rows["b-live"].metric == 0.25  # summary, else last logged value
    assert rows["b-live"].steps == 4 and rows["c-killed"].checkpoint and not rows["d-crashed"].checkpoint
    assert rows["c-killed"].note == f"klear-lab resume {stopped}"
    assert rows["d-crashed"].note.startswith("ValueError: bad batch -> no checkpoint: klear-lab train ")
    assert "not checked from here" in rows["e-elsewhere"].note and "f-broken" in rows["f-broken"].note
    assert [r.run_dir for r in list_runs([runs], statuses=["stopped", "failed"])] == [
        str(stopped), str(runs / "d-crashed"), str(runs / "h-pid-reused")]


def test_a_run_without_its_config_is_not_sent_to_resume_or_train(tmp_path):
    """Both commands read RUN/config.yaml: a run that lost it was told ``klear-lab resume RUN``, which refused it."""
    runs = tmp_path / "runs"
    for name in ("a-stopped", "b-failed"):
        run_dir = make_run(runs, name, "failed", error="RuntimeError: boom" if name == "b-failed" else "")
        (run_dir / "config.yaml").unlink()
    (runs / "a-stopped" / "checkpoints").mkdir()
    (runs / "a-stopped" / "checkpoints" / "last.ckpt").write_bytes(b"")
    rows = {Path(r.run_dir).name: r.note for r in list_runs([runs])}
    missing = "config.yaml is missing: neither resume nor a rerun can start from this directory"
    assert rows["a-stopped"] == f"{runs / 'a-stopped'}/{missing}"  # was: klear-lab resume RUN
    assert rows["b-failed"] == f"RuntimeError: boom -> {runs / 'b-failed'}/{missing}"


def test_a_damaged_run_is_listed_with_a_note_naming_the_file(tmp_path, capsys):
    """A run.json that is JSON but no object, a metrics.csv that is not UTF-8, a summary.json that is a list or
    holds a metric that is no number ended ``klear-lab runs`` with a traceback (exit 1), listing no run at all."""
    runs = tmp_path / "runs"
    record = make_run(runs, "a-record-list", "failed")
    (record / "run.json").write_text("[1, 2]")
    binary = make_run(runs, "b-binary-csv", "failed", error="ValueError: bad batch")
    (binary / "csv" / "metrics.csv").write_bytes(b"step\n\xff\n")
    summary = make_run(runs, "c-summary-list", "completed", kind="sft")
    (summary / "summary.json").write_text("[1, 2]")
    odd = make_run(runs, "d-odd-values", "completed", tags="kind:sft", attempts="two")
    (odd / "summary.json").write_text(json.dumps({"val/acc": "high"}))
    make_run(runs, "e-whole", "completed", kind="sft")
    rank = make_run(runs, "f-rank-error", "failed")  # a DDP rank's error, cut inside a character
    (rank / "rank1.error").write_bytes("RuntimeError: é".encode()[:-1])
    assert main(["runs", str(runs), "--json"]) == 0
    out, err = capsys.readouterr()
    rows = {Path(r["run_dir"]).name: r for r in map(json.loads, out.splitlines())}
    assert {name: (r["status"], r["steps"], r["metric"]) for name, r in rows.items()} == {
        "a-record-list": ("unknown", None, None), "b-binary-csv": ("failed", None, None),
        "c-summary-list": ("completed", 4, 0.25), "d-odd-values": ("completed", 4, 0.25),
        "e-whole": ("completed", 4, 0.25), "f-rank-error": ("failed", 4, 0.25)}  # the CSV's value for a bad summary
    assert rows["a-record-list"]["note"] == f"unreadable {record / 'run.json'}: a JSON list, not an object"
    assert rows["b-binary-csv"]["note"].startswith(f"unreadable {binary / 'csv' / 'metrics.csv'}: 'utf-8' codec")
    assert rows["b-binary-csv"]["note"].endswith(f"ValueError: bad batch -> no checkpoint: klear-lab train "
                                                 f"{binary / 'config.yaml'}")
    assert rows["c-summary-list"]["note"] == f"unreadable {summary / 'summary.json'}: a JSON list, not an object"
    assert rows["d-odd-values"]["note"] == f"{odd / 'summary.json'}: val/acc is 'high', not a number"
    assert (rows["d-odd-values"]["kind"], rows["d-odd-values"]["attempts"]) == ("?", 1)
    assert rows["e-whole"]["note"] == "" and "Traceback" not in err
    assert rows["f-rank-error"]["note"].startswith("rank 1: RuntimeError: \ufffd -> no checkpoint: klear-lab train")
    assert main(["runs", str(runs), "--metric", "val/acx"]) == 2  # the did-you-mean, and no table of empty cells
    out, err = capsys.readouterr()
    assert out == "" and "(did you mean 'val/acc'?)" in err


def test_a_sweep_trial_is_continued_by_its_sweep(tmp_path):
    sweep = tmp_path / "sweep_runs" / "quick"
    make_run(sweep / "runs", "quick-clip-ppo-s0", "failed", error="KeyboardInterrupt")
    (sweep / "sweep.json").write_text(json.dumps({"name": "quick", "spec": "sweeps/quickstart.yaml"}))
    (row,) = list_runs([tmp_path / "sweep_runs"])  # sweeps directory -> sweep -> runs -> run
    assert row.note == "KeyboardInterrupt -> sweep trial: run the sweep again: klear-lab sweep sweeps/quickstart.yaml"
    assert [r.run_dir for r in list_runs([sweep / "runs" / "quick-clip-ppo-s0", sweep])] == [row.run_dir]
    assert [Path(r.run_dir).name for r in list_runs([tmp_path])] == ["quick-clip-ppo-s0"]  # `klear-lab runs .`
    (sweep / "sweep.json").write_text("[1, 2]")  # damaged: the spec beside it
    assert list_runs([sweep])[0].note.endswith(f"run the sweep again: klear-lab sweep {sweep / 'spec.yaml'}")


def test_resume_of_a_sweep_trial_points_to_its_sweep(tmp_path, capsys):
    """Resumed alone, a trial completed where its study could not see it, and the sweep trained it again."""
    sweep = tmp_path / "sweep_runs" / "quick"
    make_run(sweep / "runs", "quick-clip-ppo-s0", "failed", error="KeyboardInterrupt")
    (sweep / "sweep.json").write_text(json.dumps({"name": "quick", "spec": "sweeps/quickstart.yaml"}))
    run = sweep / "runs" / "quick-clip-ppo-s0"
    (run / "config.yaml").write_text("run: {name: quick-clip-ppo, kind: rl, notes: sweep quick trial 3}\n")
    (run / "checkpoints").mkdir()  # stopped at a checkpoint: the sweep resumes it from there
    (run / "checkpoints" / "last.ckpt").write_bytes(b"")
    before = sorted(p.name for p in run.rglob("*"))
    assert main(["resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert (f"{run}: a trial of a sweep: continue the sweep instead, which resumes it from its checkpoint: "
            "klear-lab sweep sweeps/quickstart.yaml") in err
    assert sorted(p.name for p in run.rglob("*")) == before
    # not a trial: a starting point (a parent on several devices is resumed by hand), an eval run of a trial
    parent = make_run(sweep / "runs", "sft-parent-s0", "failed", kind="sft")
    (parent / "config.yaml").write_text("run: {name: sft-parent, kind: sft}\n")
    evaluation = make_run(sweep / "runs", "quick-clip-ppo-eval-s0", "completed", kind="eval")
    (evaluation / "config.yaml").write_text("run: {name: x-eval, kind: eval, notes: sweep quick trial 3}\n")
    for other in (parent, evaluation):
        assert main(["resume", str(other)]) == 2  # refused for what it is, not sent to the sweep
        assert "a trial of a sweep" not in capsys.readouterr().err


def test_cli_lists_runs_and_names_a_missing_directory(tmp_path, capsys, monkeypatch):
    make_run(tmp_path / "runs", "x", "completed", kind="sft")
    monkeypatch.chdir(tmp_path)
    assert main(["runs", "--json"]) == 0  # default: runs/ and sweep_runs/ here
    (line,) = capsys.readouterr().out.splitlines()
    listed = json.loads(line)
    assert listed | {"run_dir": "-", "updated": "-"} == {
        "run_dir": "-", "kind": "sft", "status": "completed", "attempts": 1, "steps": 4, "metric": 0.25,
        "checkpoint": False, "note": "", "updated": "-", "command": None}
    changed = max(p.stat().st_mtime for p in (tmp_path / "runs/x/run.json", tmp_path / "runs/x/csv/metrics.csv"))
    assert listed["updated"] == time.strftime("%Y-%m-%d %H:%M", time.localtime(changed))
    assert main(["runs"]) == 0 and "1 completed" in capsys.readouterr().out
    assert main(["runs", "nowhere"]) == 2
    assert "nowhere: no such directory" in capsys.readouterr().err
    assert main(["runs", "runs/x/run.json"]) == 2  # a file: was "no runs", exit 0
    assert "run.json: not a directory" in capsys.readouterr().err


def test_a_metric_no_listed_run_has_is_said_with_a_did_you_mean(tmp_path, capsys):
    """``--metric val/acx`` printed an empty column and exited 0; then the table, and the error after it."""
    runs = tmp_path / "runs"
    make_run(runs, "a", "completed", kind="sft")
    (runs / "a" / "summary.json").write_text(json.dumps({"val/acc": 0.5, "perf/train_seconds": 3.0, "_identity": {}}))
    make_run(runs, "b", "failed", kind="rl", error="ValueError: bad batch")
    assert main(["runs", str(runs), "--metric", "val/acx"]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # no table with an empty column before the error
    assert err.strip() == ("klear-lab: error: no listed run has the metric 'val/acx' (did you mean 'val/acc'?); "
                           "they have under val/: val/acc")
    assert main(["runs", str(runs), "--metric", "trian/loss", "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # no JSON lines of empty metrics before the error
    assert "(did you mean 'train/loss'?)" in err and "perf/train_seconds" in err and "_identity" not in err
    assert main(["runs", str(runs), "--metric", "perf/train_seconds"]) == 0  # one run has it: no message
    assert capsys.readouterr().err == ""
    (runs / "b" / "csv" / "metrics.csv").write_text("step,train/loss\n0,1.5\n")
    assert main(["runs", str(runs / "b"), "--metric", "val/acc"]) == 0  # logged by RL runs, not yet by this one
    assert capsys.readouterr().err.strip() == "klear-lab: note: no listed run has logged 'val/acc' yet"
    odd = make_run(tmp_path / "odd", "c", "failed", kind="?")  # no run kind known: a plain listing stays exit 0
    (odd / "csv" / "metrics.csv").write_text("step,train/loss\n0,1.5\n")
    assert main(["runs", str(odd.parent)]) == 0
    assert capsys.readouterr().err.strip() == "klear-lab: note: no listed run has the metric 'val/acc'"


def test_a_run_id_keeps_the_runs_time_hash_and_seed():
    """The id was the directory name's last 40 characters: "quickstart-sft-eval-..." became "start-sft-eval-..."."""
    from klear_lab.tracking import RUN_ID_CHARS, run_id_of

    long = Path("runs/quickstart-sft-eval-20261203-142857-a5ce14-s0")
    run_id = run_id_of(long)
    assert run_id.startswith("quickstar-") and run_id.endswith("-20261203-142857-a5ce14-s0")
    assert len(run_id) == RUN_ID_CHARS and run_id == run_id_of(long)
    twin = Path("runs/quickstart-sft-eval2-20261203-142857-a5ce14-s0")  # cut to the same start: kept apart
    assert run_id_of(twin) != run_id and run_id_of(twin).startswith("quickstar-")
    assert run_id_of(Path("runs/rl-20261203-142857-a5ce14-s0-2")) == "rl-20261203-142857-a5ce14-s0-2"
    assert run_id_of(Path("x" * 50)) == "x" * 40 and run_id_of(Path("a.b")) == "a-b"


def test_a_run_that_failed_on_its_config_or_data_or_diverged_is_told_to_fix_it_first(tmp_path):
    """A diverged run was advised ``klear-lab train RUN/config.yaml`` (or ``resume`` with a checkpoint), which
    diverges again identically; so was a run refused on its config or data. A sweep does not retry these."""
    from klear_lab.errors import ComponentError, ConfigError, DataError, DivergedError
    from klear_lab.resume import DataChangedError
    from klear_lab.run import error_line

    runs = tmp_path / "runs"
    diverged = error_line(DivergedError("training diverged: grad_norm is nan at step 3, so the run stops"))
    assert diverged.startswith("klear_lab.errors.DivergedError: ")  # as run.json records it
    with_ckpt = make_run(runs, "a-diverged", "failed", error=diverged)
    (with_ckpt / "checkpoints").mkdir()
    (with_ckpt / "checkpoints" / "last.ckpt").write_bytes(b"")
    make_run(runs, "b-diverged", "failed", error=diverged)
    refused = {"c-config": ConfigError("trainer.strategy='fsdp': not for RL"),
               "d-component": ComponentError("reward 'mine' returned 2 outputs for 4 completions"),
               "e-data": DataError("data.sources[0].path: no such file"),
               "f-data-changed": DataChangedError("the training records differ from those it started with")}
    for name, exc in refused.items():
        make_run(runs, name, "failed", error=error_line(exc))
    ddp = "rank 1: klear_lab.errors.DataError: row 3: no answer; rank 0: RuntimeError: gloo: connection closed"
    make_run(runs, "g-ddp", "failed", error=ddp)
    make_run(runs, "h-crash", "failed", error="RuntimeError: CUDA error: an illegal memory access")
    rows = {Path(r.run_dir).name: r for r in list_runs([runs])}
    lower = "fix the config first (a lower optim.lr, say): a rerun would likely repeat it; klear-lab train"
    for name in ("a-diverged", "b-diverged"):
        assert rows[name].note == f"{diverged} -> {lower} {runs / name / 'config.yaml'} optim.lr=..."
    for name in [*refused.keys() - {"d-component"}, "g-ddp"]:
        assert rows[name].note.endswith(f" -> fix the config or data first: a rerun would likely repeat it; "
                                        f"klear-lab train {runs / name / 'config.yaml'} KEY=VALUE"), rows[name].note
    assert rows["h-crash"].note.endswith("-> no checkpoint: klear-lab train " + str(runs / "h-crash" / "config.yaml"))
    assert rows["d-component"].note.endswith(" -> fix the component's code (the file the error names) first: a "
                                             f"rerun would repeat it; then klear-lab train {runs / 'd-component'}"
                                             "/config.yaml")  # no plugin file kept: see test_run_list_component_error


def test_the_command_that_started_a_failed_run_is_listed_and_offered_after_a_fix(tmp_path, capsys, monkeypatch):
    """``run.json``'s ``command`` is in ``runs --json``, and a run refused on its config or data is told it as the
    rerun that reads its fixed experiment (the saved config.yaml does not), from where it started."""
    from klear_lab.errors import DataError
    from klear_lab.run import error_line

    command = ["klear-lab", "train", "experiments/mine.yaml", "rl.steps=3"]
    error = error_line(DataError("data.sources[0]: row 3 has no answer"))
    make_run(tmp_path / "runs", "x", "failed", error=error, command=command, work_dir=str(tmp_path / "my lab"))
    make_run(tmp_path / "runs", "y", "failed", error=error, command="klear-lab train a.yaml")  # not a list: left out
    monkeypatch.chdir(tmp_path)
    assert main(["runs", "--json"]) == 0
    rows = {Path(r["run_dir"]).name: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert rows["x"]["command"] == command and rows["y"]["command"] is None
    assert rows["x"]["note"].endswith(f"; or, once its experiment is fixed, cd '{tmp_path / 'my lab'}' && klear-lab "
                                      "train experiments/mine.yaml rl.steps=3")  # a path with a space, quoted
    assert rows["y"]["note"].endswith("KEY=VALUE")


def test_a_sweep_trial_that_diverged_is_not_sent_to_the_sweep_again(tmp_path):
    from klear_lab.errors import DivergedError
    from klear_lab.run import error_line

    sweep = tmp_path / "sweep_runs" / "quick"
    diverged = error_line(DivergedError("training diverged: grad_norm is inf at step 7"))
    make_run(sweep / "runs", "quick-lr-0.1-s0", "failed", error=diverged)
    make_run(sweep / "runs", "quick-lr-0.01-s0", "stopped", error="KeyboardInterrupt")
    (sweep / "sweep.json").write_text(json.dumps({"name": "quick", "spec": "sweeps/quickstart.yaml"}))
    rows = {Path(r.run_dir).name: r for r in list_runs([sweep])}
    assert rows["quick-lr-0.1-s0"].note == (f"{diverged} -> sweep trial: fix the config first (a lower optim.lr, "
                                            "say) in the sweep spec: a rerun of the sweep would likely repeat it")
    assert rows["quick-lr-0.01-s0"].note.endswith("sweep trial: run the sweep again: klear-lab sweep "
                                                  "sweeps/quickstart.yaml")
