"""``klear-lab reproduce`` on a real sweep (subprocess trials, SQLite study) of the fast toy runner."""

from __future__ import annotations

import os
import subprocess

import pandas as pd
import yaml
from sweep_fixtures import REPO, sweep_cmd, write_spec

from klear_lab.cli_sweep import main


def write_analysis(tmp, name: str, sweep: str) -> None:
    body = {"title": f"Toy {name}", "benchmarks": ["A"], "paper": {"0.001": [1.0], "0.002": [2.0], "0.003": [3.0]},
            "baseline": "0.001", "sweeps": [sweep],
            "claims": [{"better": "0.002", "than": "0.001", "text": "0.002 beats 0.001"},
                       {"better": "0.001", "than": "0.003", "text": "0.001 beats 0.003"}]}
    (tmp / "analysis").mkdir(exist_ok=True)
    (tmp / "analysis" / f"{name}.yaml").write_text(yaml.safe_dump(body, sort_keys=False))


def run_sweep(spec) -> None:
    env = {**os.environ, "KLEAR_FAKE_SLEEP": "0.05", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(sweep_cmd(spec, "--workers", "2"), cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_reproduce_a_finished_sweep(tmp_path, capsys, monkeypatch):
    import wandb

    inits, real_init = [], wandb.init
    monkeypatch.setattr(wandb, "init", lambda **kw: inits.append(kw) or real_init(**kw))
    spec = write_spec(tmp_path, seeds=(0, 1))
    write_analysis(tmp_path, "toy_table", "../toy.yaml")
    write_analysis(tmp_path, "other_table", "../other.yaml")
    write_spec(tmp_path, name="other")                       # a sweep that has not run
    analysis = tmp_path / "analysis" / "toy_table.yaml"

    assert main(["reproduce", str(analysis)]) == 2           # nothing run yet: say what to run
    err = capsys.readouterr().err
    assert "no results yet" in err and f"klear-lab sweep {spec}" in err and str(analysis) in err

    run_sweep(spec)
    assert main(["reproduce", str(analysis)]) == 0
    out_dir = tmp_path / "out" / "toy" / "reproduce" / "toy_table"
    claims = pd.read_csv(out_dir / "claims.csv")
    # toy runner: val/acc = 100 * lr + seed / 1000, so lr=0.002 > lr=0.001 > ... < lr=0.003
    assert claims["verdict"].tolist() == ["reproduced", "contradicted"]
    assert pd.read_csv(out_dir / "arms.csv")["n"].tolist() == [2, 2, 2]
    report = (out_dir / "report.md").read_text()
    assert "6 of 6 trials complete" in report and "| 0.002 beats 0.001 |" in report
    assert (out_dir / "deltas.png").read_bytes()[:4] == b"\x89PNG"
    assert not list(out_dir.glob(".*tmp*"))                  # no temporary files left behind
    printed = capsys.readouterr().out
    assert "reproduced" in printed and "contradicted" in printed and str(out_dir / "report.md") in printed
    # one offline W&B run in the sweep's group, with the tables and the figure
    runs = list((out_dir / "wandb").glob("offline-run-*"))
    flat = " ".join(printed.split())  # Rich wraps the line where the temporary path makes it long
    assert len(runs) == 1 and str(runs[0]) in flat and "job type reproduce" in flat
    assert list(runs[0].glob("run-*.wandb"))[0].stat().st_size > 0
    assert [(k["group"], k["job_type"], k["name"], k["mode"]) for k in inits] == [
        ("toy", "reproduce", "reproduce-toy_table", "offline")]
    media = {p.name.split("_")[0] for p in (runs[0] / "files" / "media").rglob("*") if p.is_file()}
    assert media >= {"arms", "claims", "deltas"}, media

    # the sweep directory (its frozen spec) as an explicit target, and another output dir
    assert main(["reproduce", str(analysis), str(tmp_path / "out" / "toy"), "--out-dir", str(tmp_path / "r"),
                 "--no-wandb"]) == 0
    assert not (tmp_path / "r" / "wandb").exists()
    assert pd.read_csv(tmp_path / "r" / "claims.csv")["verdict"].tolist() == ["reproduced", "contradicted"]

    # a directory of analyses: the one with results is reproduced, the other is skipped
    capsys.readouterr()
    summary = tmp_path / "summary" / "claims.md"
    assert main(["reproduce", str(tmp_path / "analysis"), "--summary", str(summary)]) == 0
    out = capsys.readouterr().out
    assert "skipped:" in out and "other_table.yaml: no results yet" in out and "Toy toy_table" in out
    assert "the paper's claims on this machine's sweeps" in out and "not run yet: other_table" in out
    assert "ours Δ [95% CI]" in out  # escaped: Rich would read the brackets as a markup tag and drop them
    text = summary.read_text()
    assert "| Toy toy_table | 0.002 beats 0.001 | `toy` |" in text and "| reproduced |" in text
    assert "Not run yet: `other_table`" in text
    multiplicity = "2 claims with an interval, each tested at 95 % with no correction for multiple comparisons"
    assert multiplicity in text and multiplicity in " ".join(out.split())

    # an analysis whose first sweep was started (an empty study) takes the later one that has results
    from klear_lab.sweep.launch import freeze_spec
    from klear_lab.sweep.spec import load_spec
    from klear_lab.sweep.storage import default_storage_url, open_study

    other = load_spec(tmp_path / "other.yaml")
    url = default_storage_url(other)
    freeze_spec(other, url)
    open_study(other, url, create=True, heartbeat=False)
    body = yaml.safe_load(analysis.read_text()) | {"sweeps": ["../other.yaml", "../toy.yaml"]}
    (tmp_path / "analysis" / "both_table.yaml").write_text(yaml.safe_dump(body))
    assert main(["reproduce", str(tmp_path / "analysis" / "both_table.yaml"), "--no-wandb"]) == 0
    assert (tmp_path / "out" / "toy" / "reproduce" / "both_table" / "claims.csv").is_file()

    # a benchmark mapped to a metric the sweep logs (the toy runner's objective): benchmarks.csv and a
    # W&B table; a later run into the same directory that maps none leaves no benchmarks.csv behind
    mapped = tmp_path / "analysis" / "mapped_table.yaml"
    mapped.write_text(yaml.safe_dump(yaml.safe_load(analysis.read_text())
                                     | {"sweeps": [{"spec": "../toy.yaml", "metrics": {"A": "val/acc"}}]}))
    out = tmp_path / "mapped"
    assert main(["reproduce", str(mapped), "--out-dir", str(out)]) == 0
    assert pd.read_csv(out / "benchmarks.csv")[["benchmark", "metric", "verdict"]].values.tolist() == [
        ["A", "val/acc", "reproduced"],  # the second claim's paper Δ on A is against it: said beside the verdict
        ["A", "val/acc", "contradicted; the paper's own Δ here is -2: not the claim's side"]]
    assert pd.read_csv(out / "arms.csv")["ours A n"].tolist() == [2, 2, 2]
    run = next((out / "wandb").glob("offline-run-*"))
    assert any(p.name.startswith("benchmarks_") for p in (run / "files" / "media").rglob("*"))
    assert main(["reproduce", str(analysis), "--out-dir", str(out), "--no-wandb"]) == 0
    assert not (out / "benchmarks.csv").exists() and (out / "claims.csv").is_file()


def test_a_directory_of_analyses_none_of_which_has_results_fails_writing_nothing(tmp_path, capsys):
    """As a single analysis without results does (exit 2), not an empty table and summary with exit 0."""
    write_spec(tmp_path, seeds=(0, 1))
    write_analysis(tmp_path, "toy_table", "../toy.yaml")
    write_analysis(tmp_path, "other_table", "../toy.yaml")
    summary = tmp_path / "claims.md"
    assert main(["reproduce", str(tmp_path / "analysis"), "--summary", str(summary), "--no-wandb"]) == 2
    captured = capsys.readouterr()
    assert captured.out.count("skipped: ") == 2 and "`klear-lab sweep " in captured.out
    assert f"{tmp_path / 'analysis'}: no results yet for any of its 2 analyses" in captured.err
    assert not summary.exists() and "the paper's claims on this machine's sweeps" not in captured.out


def test_validate_only_and_bad_spec(tmp_path, capsys):
    write_spec(tmp_path, seeds=(0, 1))
    write_analysis(tmp_path, "toy_table", "../toy.yaml")
    assert main(["reproduce", str(tmp_path / "analysis"), "--validate-only"]) == 0
    assert "ok: " in capsys.readouterr().out
    bad = tmp_path / "analysis" / "toy_table.yaml"
    bad.write_text(bad.read_text().replace("baseline: '0.001'", "baseline: '0.9'"))
    assert main(["reproduce", str(bad), "--validate-only"]) == 2
    assert f"{bad}: baseline: '0.9' is not a paper arm" in capsys.readouterr().err
    assert main(["reproduce", str(tmp_path / "nothing.yaml")]) == 2
    assert "nothing.yaml: no such analysis spec" in capsys.readouterr().err
    assert main(["reproduce", str(bad), "--summary", str(tmp_path / "s.md")]) == 2  # summary needs a directory
    assert "--summary goes with a directory" in capsys.readouterr().err


def test_a_bad_analysis_in_a_directory_fails_the_command_but_not_the_others(tmp_path, capsys):
    spec = write_spec(tmp_path, seeds=(0, 1))
    write_analysis(tmp_path, "good", "../toy.yaml")
    write_analysis(tmp_path, "bad", "../toy.yaml")
    bad = tmp_path / "analysis" / "bad.yaml"
    bad.write_text(bad.read_text().replace("title:", "titel:"))
    run_sweep(spec)
    assert main(["reproduce", str(tmp_path / "analysis")]) == 2
    captured = capsys.readouterr()
    assert f"{bad}: unknown key 'titel'" in captured.err and "1 analysis spec(s) failed: bad" in captured.err
    assert (tmp_path / "out" / "toy" / "reproduce" / "good" / "claims.csv").is_file()


def test_a_wandb_failure_does_not_lose_the_report(tmp_path, capsys, monkeypatch):
    import wandb

    spec = write_spec(tmp_path, seeds=(0, 1))
    write_analysis(tmp_path, "toy_table", "../toy.yaml")
    run_sweep(spec)

    def no_key(**kwargs):
        raise wandb.errors.UsageError("api_key not configured (no-tty)")

    monkeypatch.setattr(wandb, "init", no_key)
    assert main(["reproduce", str(tmp_path / "analysis" / "toy_table.yaml")]) == 0
    assert "W&B logging skipped: UsageError: api_key not configured" in capsys.readouterr().out
    assert (tmp_path / "out" / "toy" / "reproduce" / "toy_table" / "report.md").is_file()


def test_an_out_dir_that_is_a_file_is_refused_before_the_study_is_read(tmp_path, capsys, monkeypatch):
    """--out-dir naming a file (or a path under one) failed with FileExistsError / NotADirectoryError from
    ``mkdir`` in write_reproduction (exit 1), after the study was read and the tables computed."""
    from klear_lab.sweep import storage
    from klear_lab.sweep.launch import freeze_spec
    from klear_lab.sweep.spec import load_spec

    spec = load_spec(write_spec(tmp_path, seeds=(0, 1)))
    url = storage.default_storage_url(spec)
    freeze_spec(spec, url)
    storage.open_study(spec, url, create=True, heartbeat=False)  # started, no trial: a report of nothing
    write_analysis(tmp_path, "toy_table", "../toy.yaml")
    analysis = str(tmp_path / "analysis" / "toy_table.yaml")
    (tmp_path / "a_file").write_text("keep me\n")

    def no_study(*args, **kwargs):
        raise AssertionError("the study was read")

    monkeypatch.setattr(storage, "open_study", no_study)
    for out, said in [(tmp_path / "a_file", "is a file; give a directory"),
                      (tmp_path / "a_file" / "sub", f"{tmp_path / 'a_file'} is a file, not a directory")]:
        assert main(["reproduce", analysis, "--out-dir", str(out), "--no-wandb"]) == 2
        assert f"--out-dir {out}: {said}" in capsys.readouterr().err
    assert (tmp_path / "a_file").read_text() == "keep me\n"
