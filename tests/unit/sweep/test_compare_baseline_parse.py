"""``klear-lab compare --baseline`` read as a spec's ``baseline:`` is (``1e-3`` a float), refused when it names no
arm a tpe/random sweep sampled, a did-you-mean for a label whose numbers are an arm's written another way, and
the delta cell saying why it has no interval."""

from __future__ import annotations

import os
import subprocess

import pandas as pd
import pytest
from rich.console import Console
from sweep_fixtures import REPO, sampled_study, sweep_cmd, write_spec

from klear_lab.cli_sweep import main
from klear_lab.errors import ConfigError
from klear_lab.sweep.checks import check_spec
from klear_lab.sweep.compare import TrialRecord, compare_study, summarize
from klear_lab.sweep.compare_text import to_markdown
from klear_lab.sweep.spec import load_spec, with_baseline


def _run(spec):
    env = {**os.environ, "KLEAR_FAKE_SLEEP": "0.01", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(sweep_cmd(spec, "--workers", "2", "--no-compare"), cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return spec.parent / "out" / spec.stem


def test_a_mapping_baseline_reads_1e_3_as_the_spec_does(tmp_path, capsys):
    """'{optim.lr: 1e-3}' was "not a grid point" on the command line (safe_load: the string '1e-3') while the
    same `baseline:` in a spec validated."""
    sweep_dir = _run(write_spec(tmp_path, lrs=(0.001, 0.003)))
    table = sweep_dir / "compare" / "table.md"
    assert main(["compare", str(sweep_dir), "--baseline", "{optim.lr: 1e-3}"]) == 0, capsys.readouterr().err
    assert "vs lr=0.001" in table.read_text() and "baseline lr=0.001: from --baseline" in table.read_text()
    assert main(["compare", str(sweep_dir), "--baseline", "{optim.lr: 3e-3}"]) == 0
    assert "vs lr=0.003" in table.read_text()
    capsys.readouterr()

    assert main(["compare", str(sweep_dir), "--baseline", "lr=1e-3"]) == 2
    assert "--baseline lr=1e-3: no arm is labelled 'lr=1e-3'; arms: lr=0.001, lr=0.003 (did you mean 'lr=0.001'? " \
           "the same numbers, as the arm's label writes them)" in capsys.readouterr().err
    assert main(["compare", str(sweep_dir), "--baseline", "{optim.lr: 1e-3, optim.lr: 3e-3}"]) == 2
    assert "--baseline {optim.lr: 1e-3, optim.lr: 3e-3}: malformed YAML mapping: key 'optim.lr' is given twice" \
        in capsys.readouterr().err


@pytest.mark.parametrize("sampler", ["grid", "random"])
def test_a_spec_label_with_an_arms_numbers_written_otherwise_gets_a_did_you_mean(tmp_path, sampler):
    extra = {"n_trials": 2} if sampler == "random" else {}
    path = write_spec(tmp_path, lrs=(0.001, 0.002), sampler=sampler, baseline="lr=1e-3", **extra)
    with pytest.raises(ConfigError, match=r"baseline: no arm is labelled 'lr=1e-3'; arms: lr=0.001, lr=0.002 "
                                          r"\(did you mean 'lr=0.001'\?"):
        check_spec(load_spec(path))
    assert load_spec(path).baseline == "lr=1e-3"  # a saved spec is read as it is: compare --baseline may replace it
    for ok in ("lr=0.001", {"optim.lr": 1e-3}):  # a real label, or the mapping: as before
        spec = load_spec(write_spec(tmp_path, lrs=(0.001, 0.002), sampler=sampler, baseline=ok, **extra))
        check_spec(spec)
        assert spec.baseline == ok


def test_a_label_of_some_axes_is_pointed_to_the_arms_that_have_them(tmp_path):
    path = write_spec(tmp_path, baseline="lr=0.001", axes={"optim.lr": [0.001, 0.002], "optim.weight_decay": [0.1]})
    with pytest.raises(ConfigError, match=r"\(did you mean 'lr=0.001,weight_decay=0.1'\? a label names every axis\)"):
        check_spec(load_spec(path))


def test_a_cli_baseline_no_sampled_arm_is_refused_listing_the_sampled_ones(tmp_path, capsys):
    """A continuous lr range: `--baseline lr=0.001252` (the weight_decay axis left out) was taken, exit 0, with
    a note naming `baseline:` and no sampled arm to pick."""
    axes = {"optim.lr": {"low": 0.001, "high": 0.003, "log": True}, "optim.weight_decay": [0.1, 0.2]}
    sweep_dir = _run(write_spec(tmp_path, sampler="random", n_trials=3, axes=axes))
    assert main(["compare", str(sweep_dir)]) == 0
    sampled = pd.read_csv(sweep_dir / "compare" / "table.csv")["arm"].tolist()
    assert len(sampled) == 3
    capsys.readouterr()

    lr = sampled[0].split(",")[0]  # lr=0.00xxxx
    assert main(["compare", str(sweep_dir), "--baseline", lr]) == 2
    err = capsys.readouterr().err
    assert f"--baseline {lr}: no arm the sweep sampled is labelled {lr!r}; sampled arms (3): " in err
    assert all(label in err for label in sampled) and f"(did you mean {sampled[0]!r}" in err
    assert main(["compare", str(sweep_dir), "--baseline", f"{lr},weight_decay=0.3", "--rescore", "eval.samples=2"]
                ) == 2  # refused before any scoring: no draw takes weight_decay 0.3
    assert "optim.weight_decay: 0.3 cannot be drawn: it is not one of the axis's values" in capsys.readouterr().err
    assert not list(sweep_dir.glob("rescore-*"))
    capsys.readouterr()

    assert main(["compare", str(sweep_dir), "--baseline", sampled[1]]) == 0, capsys.readouterr().err
    md = (sweep_dir / "compare" / "table.md").read_text()
    assert f"vs {sampled[1]}" in md and "never sampled" not in md


def test_a_drawable_cli_baseline_never_sampled_is_refused_but_the_specs_gets_its_note(tmp_path):
    spec, study = sampled_study(tmp_path, [(0.002, 0), (0.003, 0)])
    for text in ("lr=0.001", "{optim.lr: 1e-3}"):
        with pytest.raises(ConfigError, match=r"^--baseline .*: no arm the sweep sampled is labelled 'lr=0.001'; "
                                              r"sampled arms \(2\): lr=0.002, lr=0.003$"):
            compare_study(with_baseline(spec, text), study, console=Console(record=True))
    with pytest.raises(ConfigError, match=r"sampled arms \(2\): lr=0.002, lr=0.003 \(did you mean 'lr=0.002'\?"):
        compare_study(with_baseline(spec, "lr=2e-3"), study, console=Console(record=True))
    spec.baseline = "lr=0.001"  # the spec's own: written before the sweep ran, so a note, not an error
    console = Console(record=True, width=300)
    compare_study(spec, study, console=console)
    assert ("baseline arm lr=0.001 was never sampled: no deltas (add trials, or name a sampled arm with `compare "
            "--baseline ARM` or in the spec's `baseline:`)") in console.export_text()


@pytest.mark.parametrize(("a", "b", "why"), [
    ([0.5, 0.5], [0.6, 0.6, 0.6], "+0.1 (no spread: neither arm varies across its seeds: no interval)"),
    ([0.5, 0.5], [0.5, 0.5], "+0 (no spread: neither arm varies across its seeds: no interval)"),
    ([0.5, 0.6], [0.7], "+0.15 (n=1: no interval)"),
    ([0.5], [0.7, 0.8], "+0.25 (baseline n=1: no interval)"),
    ([0.5], [0.7], "+0.2 (n=1 in both arms: no interval)"),
])
def test_the_delta_cell_says_why_it_has_no_interval(tmp_path, a, b, why):
    """Arms of 2 or 3 equal seeds read "+0 (under 2 seeds or no spread: no interval)": which of the two?"""
    records = [TrialRecord(arm, s, "COMPLETE", {"m": v}) for arm, vs in (("a", a), ("b", b)) for s, v in enumerate(vs)]
    df = summarize(records, "m", [], "maximize", "a", ["a", "b"])
    assert f"| {why} |" in to_markdown(df, "m", [], "a")
    assert df["delta note"].tolist()[0] == ""  # the baseline row
