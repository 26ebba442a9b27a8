"""A reproduction says why a claim has no result, and counts a sweep's progress in grid points x seeds.

A user's review: a claim on an arm the sweep lacks, or whose seeds had not run, read a bare
``no result``; a Ctrl-C'd sweep's header said ``4/7 trials`` (an interrupted trial and its queued
retry counted apart, against 6 points) with no word on how to finish it.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import yaml
from rich.console import Console
from sweep_fixtures import write_spec

from klear_lab.analysis.report import print_reproduction, progress_line, to_markdown
from klear_lab.analysis.reproduce import reproduce
from klear_lab.analysis.spec import load_analysis
from klear_lab.sweep.compare import TrialRecord
from klear_lab.sweep.spec import load_spec

CLAIMS = [{"better": "0.002", "than": "0.001", "text": "0.002 beats 0.001"},
          {"better": "0.003", "than": "0.001", "text": "0.003 beats 0.001"}]


def write_analysis(tmp: Path, sweeps: list[str]) -> Path:
    body = {"title": "Toy table", "benchmarks": ["A"], "paper": {"0.001": [1.0], "0.002": [2.0], "0.003": [3.0]},
            "baseline": "0.001", "claims": CLAIMS, "sweeps": sweeps}
    path = tmp / "toy_analysis.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def printed(rep, tmp: Path) -> str:
    console = Console(record=True, width=400)
    print_reproduction(rep, tmp / "out", None, console)
    return console.export_text()


def test_a_claim_on_an_arm_the_sweep_lacks_says_so(tmp_path):
    """The sweep has no lr=0.002 arm (another sweep of the analysis has): its claim said "no result" only."""
    write_spec(tmp_path, seeds=(0, 1))
    write_spec(tmp_path, name="mine", lrs=(0.001, 0.003), seeds=(0, 1))
    analysis = load_analysis(write_analysis(tmp_path, ["toy.yaml", "mine.yaml"]))
    ref = analysis.sweeps[1]
    recs = [TrialRecord(arm, seed, "COMPLETE", {"val/acc": v + seed / 100})
            for arm, v in (("lr=0.001", 0.1), ("lr=0.003", 0.3)) for seed in (0, 1)]
    rep = reproduce(analysis, ref, load_spec(ref.spec_path), recs)
    why = "no result (0.002: not an arm of this sweep)"
    assert rep.claims["verdict"].tolist() == [why, "reproduced"]
    assert f"| {why} |" in to_markdown(rep) and why in printed(rep, tmp_path)
    assert (rep.n_complete, rep.n_trials, rep.unfinished) == (4, 4, [])  # the sweep itself is complete


def add_trial(study: optuna.Study, lr: float, seed: int, state: str, value: float | None = None,
              **extra: object) -> None:
    """A trial of point (lr, seed) as the sweep records it (arm label, seed, point key; ``extra`` attrs)."""
    from klear_lab.sweep.grid import point_key

    attrs = {"arm": f"lr={lr}", "seed": seed, "point": point_key({"optim.lr": lr}, seed),
             "metrics": {"val/acc": value} if value is not None else {}, **extra}
    study.add_trial(optuna.trial.create_trial(state=getattr(optuna.trial.TrialState, state), value=value,
                                              user_attrs=attrs))


def half_done_sweep(tmp: Path):
    """The toy sweep (3 arms x 2 seeds) with lr=0.001 and lr=0.003 complete on both seeds: (spec, study)."""
    from klear_lab.sweep.launch import freeze_spec
    from klear_lab.sweep.storage import default_storage_url, open_study

    spec = load_spec(write_spec(tmp, seeds=(0, 1)))
    url = default_storage_url(spec)
    freeze_spec(spec, url)
    study = open_study(spec, url, create=True, heartbeat=False)
    for lr in (0.001, 0.003):
        for seed in (0, 1):
            add_trial(study, lr, seed, "COMPLETE", 100 * lr + seed / 1000)
    return spec, study


def interrupted_sweep(tmp: Path) -> Path:
    """The toy sweep (3 arms x 2 seeds) Ctrl-C'd during lr=0.002 seed=0: that trial failed and its retry
    is queued beside lr=0.002 seed=1, not started: 7 trials, 6 points, 4 complete."""
    spec, study = half_done_sweep(tmp)
    add_trial(study, 0.002, 0, "FAIL")
    add_trial(study, 0.002, 1, "WAITING")
    add_trial(study, 0.002, 0, "WAITING")
    return spec.sweep_dir


def test_an_interrupted_sweep_counts_points_and_says_how_to_finish(tmp_path):
    """From the sweep's directory, as `klear-lab reproduce ANALYSIS SWEEP_DIR`: the header counted 7 trials,
    the claim on lr=0.002 said a bare "no result", and nothing said to run the sweep again."""
    from klear_lab.analysis import run_reproduction

    sweep_dir = interrupted_sweep(tmp_path)
    console = Console(record=True, width=400)
    rep = run_reproduction(write_analysis(tmp_path, ["toy.yaml"]), sweep_dir, tmp_path / "r", console, wandb=False)
    rerun = f"klear-lab sweep {tmp_path / 'toy.yaml'}"  # the spec it was launched from, not the frozen copy
    assert (rep.n_complete, rep.n_trials) == (4, 6)
    assert rep.unfinished == ["lr=0.002 seed=0", "lr=0.002 seed=1"]
    assert rep.claims["verdict"].tolist() == [
        f"no result (0.002: 0 of 2 seeds completed: run the sweep again: {rerun})", "reproduced"]
    progress = ("4 of 6 trials complete (grid points x seeds); 2 not finished (lr=0.002 seed=0, lr=0.002 seed=1): "
                "run the sweep again: ")
    assert f"{progress}`{rerun}`" in (tmp_path / "r" / "report.md").read_text()
    out = console.export_text()
    assert "sweep toy (4/6 trials)" in out and f"{progress}{rerun}" in out


def test_a_finished_sweep_needs_no_rerun(tmp_path):
    analysis = load_analysis(write_analysis(tmp_path, [str(write_spec(tmp_path, seeds=(0, 1)))]))
    recs = [TrialRecord(f"lr={lr}", seed, "COMPLETE", {"val/acc": 100 * lr + seed / 1000})
            for lr in (0.001, 0.002, 0.003) for seed in (0, 1)]
    recs.append(TrialRecord("lr=0.002", 1, "FAIL"))  # a failed attempt its retry made up for
    rep = reproduce(analysis, analysis.sweeps[0], load_spec(analysis.sweeps[0].spec_path), recs)
    assert (rep.n_complete, rep.n_trials) == (6, 6) and rep.unfinished == []  # 7 trials, 6 points
    assert "6 of 6 trials complete (grid points x seeds)\n" in to_markdown(rep)
    assert "run the sweep again" not in printed(rep, tmp_path)


def test_pruned_points_are_counted_and_not_sent_to_a_rerun(tmp_path):
    """A pruned point is finished without a result: "4 of 6 complete" gave no reason for the other 2, and the
    claim said "0 of 2 seeds finished, 2 pruned: run the sweep again", which would run nothing."""
    write_spec(tmp_path, seeds=(0, 1))
    analysis = load_analysis(write_analysis(tmp_path, ["toy.yaml"]))
    ref = analysis.sweeps[0]
    recs = [TrialRecord(arm, seed, "COMPLETE", {"val/acc": v + seed / 100})
            for arm, v in (("lr=0.001", 0.1), ("lr=0.003", 0.3)) for seed in (0, 1)]
    recs += [TrialRecord("lr=0.002", seed, "PRUNED") for seed in (0, 1)]
    rep = reproduce(analysis, ref, load_spec(ref.spec_path), recs)
    assert rep.claims["verdict"].tolist()[0] == "no result (0.002: 0 of 2 seeds completed (2 pruned))"
    line = "4 of 6 trials complete (grid points x seeds); 2 pruned"
    assert f"{line}\n" in printed(rep, tmp_path) and f"{line}" in to_markdown(rep)
    assert "run the sweep again" not in to_markdown(rep)


REFUSED = "ConfigError: trainer.strategy='fsdp': not for RL"


def refusing_sweep(tmp: Path, seed1: list[str]) -> tuple[Path, optuna.Study]:
    """The toy sweep (3 arms x 2 seeds), lr=0.001 and lr=0.003 complete; lr=0.002 seed=0 failed on its config
    as a trial's run marks it (``CONFIG_ERROR_ATTR``, the error), and seed=1's trials in the states ``seed1``
    (``FAIL-config``: failed on its config too)."""
    from klear_lab.sweep.trial import CONFIG_ERROR_ATTR

    spec, study = half_done_sweep(tmp)
    refused = {"error": f"{REFUSED}\n(the rest of its message)", CONFIG_ERROR_ATTR: True}
    add_trial(study, 0.002, 0, "FAIL", **refused)
    for state in seed1:
        add_trial(study, 0.002, 1, state.removesuffix("-config"), **(refused if state.endswith("-config") else {}))
    return spec.sweep_dir, study


def test_seeds_failed_on_a_config_error_say_fix_the_config_not_run_again(tmp_path):
    """Both seeds of lr=0.002 refused their config: the claim said "run the sweep again", which fails them the
    same way (the sweep itself ends with "fix the config first"), and the progress line listed them to rerun."""
    from klear_lab.analysis import run_reproduction
    from klear_lab.sweep.launch import config_failures

    sweep_dir, study = refusing_sweep(tmp_path, ["FAIL-config"])
    assert [t.number for t in config_failures(study, None)] == [4, 5]  # as `klear-lab sweep` tells them apart
    console = Console(record=True, width=600)
    rep = run_reproduction(write_analysis(tmp_path, ["toy.yaml"]), sweep_dir, tmp_path / "r", console, wandb=False)
    logs = sweep_dir / "trials"
    fix = f"fix the config first: a rerun would likely repeat (trial 4: {REFUSED}); see the trial logs in "
    assert rep.claims["verdict"].tolist() == [
        f"no result (0.002: 0 of 2 seeds completed: 2 failed on a config or data error, or diverged ({fix}{logs}))",
        "reproduced"]
    assert (rep.n_complete, rep.n_trials, rep.unfinished) == (4, 6, [])  # nothing for a rerun to do
    assert rep.failed == ["lr=0.002 seed=0", "lr=0.002 seed=1"]
    line = ("4 of 6 trials complete (grid points x seeds); 2 failed on a config or data error, or diverged "
            f"(lr=0.002 seed=0, lr=0.002 seed=1): {fix}")
    report, out = (tmp_path / "r" / "report.md").read_text(), console.export_text()
    assert f"{line}`{logs}`\n" in report and f"{line}{logs}\n" in out
    for text in (report, out):
        assert "run the sweep again" not in text and "pruned" not in text


def test_a_seed_that_did_not_finish_beside_one_refused_is_still_rerun(tmp_path):
    """lr=0.002 seed=0 refused its config, seed=1 was killed (a failure a rerun retries): only seed=1 is sent
    to a rerun."""
    from klear_lab.analysis import run_reproduction

    sweep_dir, _ = refusing_sweep(tmp_path, ["FAIL"])
    rep = run_reproduction(write_analysis(tmp_path, ["toy.yaml"]), sweep_dir, tmp_path / "r", Console(record=True),
                           wandb=False)
    rerun = f"klear-lab sweep {tmp_path / 'toy.yaml'}"
    assert rep.claims["verdict"].tolist()[0] == (
        "no result (0.002: 0 of 2 seeds completed: 1 failed on a config or data error, or diverged (fix the config "
        f"first: a rerun would likely repeat (trial 4: {REFUSED}); see the trial logs in {sweep_dir / 'trials'}); "
        f"1 not finished: run the sweep again: {rerun})")
    assert (rep.unfinished, rep.failed) == (["lr=0.002 seed=1"], ["lr=0.002 seed=0"])
    assert progress_line(rep).endswith(f"; 1 not finished (lr=0.002 seed=1): run the sweep again: {rerun}")


def test_a_refused_seed_retried_since_is_unfinished(tmp_path):
    """seed=1 refused its config, then the fixed sweep queued it again: its latest trial is the retry, not
    the refusal."""
    from klear_lab.analysis import run_reproduction

    sweep_dir, _ = refusing_sweep(tmp_path, ["FAIL-config", "WAITING"])
    rep = run_reproduction(write_analysis(tmp_path, ["toy.yaml"]), sweep_dir, tmp_path / "r", Console(record=True),
                           wandb=False)
    assert (rep.unfinished, rep.failed) == (["lr=0.002 seed=1"], ["lr=0.002 seed=0"])


def test_the_rerun_of_a_sweep_run_with_name_and_out_dir_keeps_them(tmp_path):
    """``klear-lab sweep toy.yaml --name tintb --out-dir other``, interrupted: the report said to run
    ``klear-lab sweep toy.yaml``, which continues the study 'toy' in out/, not this one."""
    from klear_lab.analysis import run_reproduction
    from klear_lab.sweep.launch import freeze_spec
    from klear_lab.sweep.storage import default_storage_url, open_study

    spec = load_spec(write_spec(tmp_path, seeds=(0, 1)), name="tintb")
    spec.out_dir = tmp_path / "other"
    url = default_storage_url(spec)
    study = open_study(spec, url, create=True, heartbeat=False)
    freeze_spec(spec, url)
    for lr in (0.001, 0.003):
        for seed in (0, 1):
            add_trial(study, lr, seed, "COMPLETE", 100 * lr + seed / 1000)
    rep = run_reproduction(write_analysis(tmp_path, ["toy.yaml"]), spec.sweep_dir, tmp_path / "r",
                           Console(record=True, width=400), wandb=False)
    rerun = f"klear-lab sweep {tmp_path / 'toy.yaml'} --name tintb --out-dir {tmp_path / 'other'}"
    assert rep.rerun == rerun
    assert progress_line(rep).endswith(f"2 not finished (lr=0.002 seed=0, lr=0.002 seed=1): run the sweep "
                                       f"again: {rerun}")
    why = f"no result (0.002: 0 of 2 seeds completed: run the sweep again: {rerun})"
    assert rep.claims["verdict"].tolist()[0] == why


def test_unfinished_points_whose_trials_raised_point_at_the_trial_logs(tmp_path):
    """A trial that raised (a plugin's exception) was only "not finished ... run the sweep again", with no word
    of the logs that say why; a killed one (Ctrl-C, no error of its own) still gets no pointer."""
    from klear_lab.analysis import run_reproduction
    from klear_lab.errors import INTERRUPTED

    spec, study = half_done_sweep(tmp_path)
    add_trial(study, 0.002, 0, "FAIL", error="RuntimeError: boom in my_filter")
    add_trial(study, 0.002, 1, "FAIL", error=INTERRUPTED)
    rep = run_reproduction(write_analysis(tmp_path, ["toy.yaml"]), spec.sweep_dir, tmp_path / "r",
                           Console(record=True, width=400), wandb=False)
    assert rep.crashed == ["lr=0.002 seed=0"]
    assert progress_line(rep).endswith(f"2 not finished (lr=0.002 seed=0, lr=0.002 seed=1), 1 of them failed (see "
                                       f"the trial logs in {spec.sweep_dir / 'trials'}): run the sweep again: "
                                       f"{rep.rerun}")


def test_a_long_verdict_folds_instead_of_being_cut_at_the_terminals_width():
    """A verdict holding the rerun command was cut to "…" on an 80-column terminal (a fresh-user walkthrough)."""
    import io

    from rich.console import Console

    from klear_lab.analysis.report import _verdict_table

    command = "klear-lab sweep /home/someone/projects/klear/myexp/sweep_my3_with_a_long_name.yaml"
    out = io.StringIO()
    Console(file=out, width=80).print(_verdict_table("claims", ["claim", "Δ", "verdict"], 1,
                                                     [["0.003 beats 0.001", "+0.10", f"no result (run {command})"]]))
    cells = "".join(line.split("│")[3].strip() for line in out.getvalue().splitlines() if line.count("│") == 4)
    assert command.replace(" ", "") in cells.replace(" ", "") and "…" not in out.getvalue()
