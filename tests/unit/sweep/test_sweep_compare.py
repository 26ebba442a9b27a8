"""The comparison table and curves on synthetic trial records and metrics CSVs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sweep_fixtures import write_spec

from klear_lab.stats import bootstrap_diff, welch_interval
from klear_lab.sweep.compare import (
    TrialRecord,
    load_records,
    summarize,
    write_comparison,
)
from klear_lab.sweep.compare_text import delta_cell, to_markdown
from klear_lab.sweep.curves import arm_curves, read_curve
from klear_lab.sweep.grid import arm_label, point_key
from klear_lab.sweep.spec import load_spec

TRUE = {"ppo": 0.50, "gppo": 0.60, "cispo": 0.45}


def _records(tmp_path=None, n_seeds=5, noise=0.01):
    rng = np.random.default_rng(1)
    out = []
    for arm, mu in TRUE.items():
        for seed in range(n_seeds):
            acc = mu + noise * rng.standard_normal()
            run_dir = None
            if tmp_path is not None:
                run_dir = tmp_path / f"{arm}-{seed}"
                (run_dir / "csv").mkdir(parents=True)
                steps = [10, 20, 30]
                rows = ["step,epoch,val/acc,train/loss"]
                rows += [f"{s},0,,{1 / s}" for s in steps]  # Lightning writes train and val rows apart
                rows += [f"{s},0,{acc * s / 30}," for s in steps]
                (run_dir / "csv" / "metrics.csv").write_text("\n".join(rows) + "\n")
            out.append(TrialRecord(arm, seed, "COMPLETE", {"val/acc": acc, "train/loss": 0.1 + seed / 100},
                                   str(run_dir) if run_dir else None))
    out.append(TrialRecord("cispo", 9, "PRUNED", {}, None))
    out.append(TrialRecord("ppo", 9, "FAIL", {}, None))
    return out


def test_bootstrap_interval_contains_true_difference():
    a = 0.6 + np.array([-0.02, -0.01, 0.0, 0.01, 0.02])
    b = 0.5 + np.array([-0.03, 0.0, 0.03])
    d, lo, hi = bootstrap_diff(a, b, seed=0)
    assert abs(d - 0.1) < 1e-12 and lo < 0.1 < hi and lo > 0 and hi - lo < 0.08
    assert bootstrap_diff(a, b, seed=0) == (d, lo, hi)  # seeded: reproducible


def test_a_float32_tie_is_no_difference_in_either_interval():
    """0.935 against float32's 0.935 printed +2.384e-09 under the bootstrap, 0 under Welch (a review)."""
    a, b = np.array([0.935]), np.array([float(np.float32(0.935))])
    assert bootstrap_diff(a, b)[0] == 0.0 == welch_interval(a, b)[0]
    assert bootstrap_diff(a + 0.001, b)[0] > 0


def test_bootstrap_coverage_on_clear_data():
    rng = np.random.default_rng(0)
    hits = 0
    for rep in range(200):
        a, b = 0.6 + 0.02 * rng.standard_normal(10), 0.5 + 0.02 * rng.standard_normal(10)
        _, lo, hi = bootstrap_diff(a, b, n_boot=2000, seed=rep)
        hits += lo < 0.1 < hi
        assert lo > 0  # a 5-sigma gap is never called a tie
    assert hits >= 0.88 * 200  # percentile bootstrap, nominal 95 %, slightly anti-conservative at n=10


def test_summarize_rows_best_and_deltas():
    df = summarize(_records(), "val/acc", ["train/loss"], "maximize", "ppo", ["ppo", "gppo", "cispo"])
    assert list(df["arm"]) == ["ppo", "gppo", "cispo"]
    assert list(df["n"]) == [5, 5, 5] and list(df["pruned"]) == [0, 0, 1] and list(df["failed"]) == [1, 0, 0]
    assert df.loc[df["best"], "arm"].tolist() == ["gppo"]
    row = df.set_index("arm").loc["gppo"]
    assert row["delta ci low"] < TRUE["gppo"] - TRUE["ppo"] < row["delta ci high"]
    cispo = df.set_index("arm").loc["cispo"]
    assert cispo["delta ci high"] < 0  # clearly worse than the baseline
    assert df.set_index("arm").loc["ppo", "delta"] == 0.0
    assert abs(row["val/acc mean"] - 0.6) < 0.02 and row["train/loss n"] == 5


def test_welch_interval_beside_the_bootstrap_one():
    """Two seeds per arm, 0.12 apart with a 0.10 spread within each arm: the bootstrap interval is
    the range of pairwise differences, [+0.02, +0.22], and excludes 0; Welch's (2 degrees of
    freedom, t = 4.303) does not. Both are in the CSV and the markdown."""
    acc = {("a", 0): 0.50, ("a", 1): 0.60, ("b", 0): 0.62, ("b", 1): 0.72}
    records = [TrialRecord(arm, seed, "COMPLETE", {"val/acc": v}) for (arm, seed), v in acc.items()]
    df = summarize(records, "val/acc", [], "maximize", "a", ["a", "b"])
    b = df.set_index("arm").loc["b"]
    assert abs(b["delta"] - 0.12) < 1e-12 and b["delta ci low"] > 0  # bootstrap: "significant"
    half = 4.303 * math.sqrt(0.005 / 2 + 0.005 / 2)  # var 0.005 per arm, df = 2
    assert abs(b["welch ci low"] - (0.12 - half)) < 1e-3 and abs(b["welch ci high"] - (0.12 + half)) < 1e-3
    assert b["welch ci low"] < 0 < b["welch ci high"]
    md = to_markdown(df, "val/acc", [], "a")
    assert "Welch t 95% CI" in md.splitlines()[0]
    assert f"[{b['welch ci low']:+.3g}, {b['welch ci high']:+.3g}]" in md.splitlines()[3]


def test_minimize_marks_lowest():
    df = summarize(_records(), "val/acc", [], "minimize", "ppo")
    assert df.loc[df["best"], "arm"].tolist() == ["cispo"]


def test_markdown_marks_best_and_baseline():
    df = summarize(_records(), "val/acc", ["train/loss"], "maximize", "ppo", ["ppo", "gppo", "cispo"])
    md = to_markdown(df, "val/acc", ["train/loss"], "ppo")
    lines = md.splitlines()
    assert lines[0].startswith("| arm | val/acc | train/loss | Δ val/acc vs ppo")
    assert "**gppo** ★" in md and "baseline" in lines[2] and "(n=5)" in lines[3]


def test_delta_of_equal_float32_means_prints_as_zero():
    row = {"baseline": False, "delta": -2.98e-08, "delta ci low": -0.035, "delta ci high": 0.035}
    assert delta_cell(row) == "+0 [-0.035, +0.035]"
    row["delta"] = -0.01
    assert delta_cell(row) == "-0.01 [-0.035, +0.035]"


def test_arm_without_trials_has_empty_cells():
    df = summarize(_records(), "val/acc", [], "maximize", "ppo", ["ppo", "gppo", "cispo", "cispo_upper"])
    row = df.set_index("arm").loc["cispo_upper"]
    assert row["n"] == 0 and math.isnan(row["val/acc mean"]) and math.isnan(row["delta"])


def test_curves_mean_across_seeds(tmp_path):
    records = _records(tmp_path, n_seeds=2)
    curve = read_curve(records[0].run_dir, "val/acc")
    assert list(curve.index) == [10, 20, 30]
    curves = arm_curves(records, "val/acc", ["ppo", "gppo", "cispo"])
    assert list(curves) == ["ppo", "gppo", "cispo"]
    ppo = curves["ppo"]
    assert list(ppo["n"]) == [2, 2, 2] and abs(ppo["mean"].iloc[-1] - TRUE["ppo"]) < 0.03


def test_write_comparison_outputs(tmp_path):
    spec = load_spec(write_spec(tmp_path))
    spec.metrics = ["train/loss"]
    from rich.console import Console

    console = Console(record=True, width=200)
    df = write_comparison(_records(tmp_path, n_seeds=2), spec, "ppo", ["ppo", "gppo", "cispo"],
                          tmp_path / "cmp", console)
    md = (tmp_path / "cmp" / "table.md").read_text()
    assert md.count("\n") == 11  # 5 table lines, then three notes after a blank line each
    assert "train/loss: each seed's last logged value, from one training batch" in md
    # seed 9 failed (ppo), was pruned (cispo) and never ran (gppo): no arm has every seed
    assert "arm gppo starred on 2 of 3 seeds: no arm has a finite val/acc on every seed (1 seed not finished)" in md
    assert pd.read_csv(tmp_path / "cmp" / "table.csv")["arm"].tolist() == ["ppo", "gppo", "cispo"]
    png = tmp_path / "cmp" / "curves.png"
    assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG"
    text = console.export_text()
    assert "★ gppo" in text and "baseline" in text and str(png) in text
    assert "Δ val/acc [bootstrap 95% CI]" in text and "Welch t 95% CI" in text  # brackets are not markup
    assert len(df) == 3 and "note: no finished trial logged" not in text
    assert "Bootstrap intervals over 2 seed(s) per arm cover well under 95 %" in text
    spec.metrics = ["train/loss", "rl/ratio_maxx"]  # a typo the pre-flight cannot catch when plugins are loaded
    write_comparison(_records(n_seeds=1), spec, "ppo", None, tmp_path / "cmp2", console)
    assert "note: no finished trial logged rl/ratio_maxx: its column is empty" in console.export_text()


def test_metrics_missing_from_the_result_come_from_metrics_csv(tmp_path):
    from klear_lab.sweep.trial import fill_from_csv, result_fields

    record = _records(tmp_path, n_seeds=1)[0]
    result = {"run_dir": record.run_dir, "metrics": {"val/acc": 0.5, "flag": True}}
    metrics, run_dir, _ = result_fields(result)
    assert metrics == {"val/acc": 0.5}  # booleans and non-numbers are dropped
    assert fill_from_csv(metrics, run_dir, ["val/acc", "train/loss", "rl/none"]) == ["train/loss"]
    assert metrics == {"val/acc": 0.5, "train/loss": 1 / 30}


def test_a_sweep_whose_every_trial_failed_still_gets_its_table(tmp_path):
    records = [TrialRecord("ppo", 0, "FAIL", {}, None), TrialRecord("gppo", 0, "FAIL", {}, None)]
    df = summarize(records, "val/acc", [], "maximize", "ppo")
    assert not df["best"].any() and df["failed"].tolist() == [1, 1]
    assert "gppo" in to_markdown(df, "val/acc", [], "ppo")


def test_an_arm_under_two_seeds_gets_its_delta_but_no_interval(tmp_path):
    """Resampling one value gives that value back: the bootstrap "interval" of one seed per arm had zero
    width and so always excluded 0 (every 1-seed paper sweep row looked significant)."""
    records = [TrialRecord("a", 0, "COMPLETE", {"m": 0.5}), TrialRecord("b", 0, "COMPLETE", {"m": 0.52}),
               TrialRecord("c", 0, "COMPLETE", {"m": 0.6}), TrialRecord("c", 1, "COMPLETE", {"m": 0.7})]
    d, lo, hi = bootstrap_diff(np.array([0.52]), np.array([0.5, 0.6]))
    assert abs(d + 0.03) < 1e-12 and math.isnan(lo) and math.isnan(hi)
    df = summarize(records, "m", [], "maximize", "a", ["a", "b", "c"]).set_index("arm")
    assert abs(df.loc["b", "delta"] - 0.02) < 1e-12 and math.isnan(df.loc["b", "delta ci low"])
    assert math.isnan(df.loc["c", "delta ci low"])  # the baseline has one seed
    md = to_markdown(df.reset_index(), "m", [], "a")
    assert "| +0.02 (n=1 in both arms: no interval) |" in md and "+0.02 [" not in md
    assert "| +0.15 (baseline n=1: no interval) |" in md


def test_the_baseline_row_has_no_interval_against_itself():
    df = summarize(_records(n_seeds=2), "val/acc", [], "maximize", "ppo").set_index("arm")
    assert df.loc["ppo", "delta"] == 0.0
    assert df.loc["ppo", ["delta ci low", "delta ci high", "welch ci low", "welch ci high"]].isna().all()
    assert df.loc["gppo", ["delta ci low", "welch ci low"]].notna().all()


def test_a_diverged_run_is_not_a_value():
    """inf left the mean, n and the best-arm mark to a diverged run, while Welch's interval dropped it."""
    records = [TrialRecord("a", s, "COMPLETE", {"m": v}) for s, v in enumerate([0.5, 0.6])]
    records += [TrialRecord("b", s, "COMPLETE", {"m": v}) for s, v in enumerate([0.7, 0.8, math.inf])]
    df = summarize(records, "m", [], "maximize", "a", ["a", "b"]).set_index("arm")
    assert df.loc["b", "m n"] == 2 and abs(df.loc["b", "m mean"] - 0.75) < 1e-12
    assert abs(df.loc["b", "delta"] - 0.2) < 1e-12 and df.loc["b", "delta ci high"] < math.inf


def test_a_seed_without_a_finite_value_shows_in_its_cell():
    """The diverged seed left the cell at n=2 with nothing to say 3 seeds had completed."""
    records = [TrialRecord("a", s, "COMPLETE", {"m": v}) for s, v in enumerate([1.0, 1.02, 1.01])]
    records += [TrialRecord("b", s, "COMPLETE", {"m": v}) for s, v in enumerate([0.9, 0.91, math.inf])]
    df = summarize(records, "m", [], "minimize", "a", ["a", "b"])
    md = to_markdown(df, "m", [], "a")
    assert "0.905 ± 0.0071 (n=2 of 3)" in md and "1.01 ± 0.01 (n=3) |" in md
    assert df["n"].tolist() == [3, 3] and df["m n"].tolist() == [3, 2]  # the CSV's columns as before


def test_failed_counts_seeds_left_without_a_finished_trial():
    """A seed whose retry completed counted its failed attempts: an arm of 2 completed seeds showed failed 2."""
    records = [TrialRecord("a", 0, "COMPLETE", {"m": 0.5}), TrialRecord("a", 1, "COMPLETE", {"m": 0.52}),
               TrialRecord("b", 0, "FAIL"), TrialRecord("b", 0, "FAIL"), TrialRecord("b", 0, "COMPLETE", {"m": 0.6}),
               TrialRecord("b", 1, "FAIL"), TrialRecord("b", 1, "FAIL"), TrialRecord("b", 2, "FAIL"),
               TrialRecord("b", 2, "PRUNED"), TrialRecord("b", 3, "RUNNING"),
               TrialRecord("b", 4, "FAIL"), TrialRecord("b", 4, "WAITING"),  # its retry is queued: not failed yet
               TrialRecord("b", 5, "FAIL"), TrialRecord("b", 5, "RUNNING")]
    df = summarize(records, "m", [], "maximize", "a", ["a", "b"]).set_index("arm")
    assert df.loc["a", "failed"] == 0 and df.loc["b", "failed"] == 1 and df.loc["b", "pruned"] == 1


def _sampled_study(tmp_path, draws):
    """An in-memory tpe study over ``optim.lr`` with one COMPLETE trial per (lr, seed, val/acc) drawn."""
    import optuna

    spec = load_spec(write_spec(tmp_path, sampler="tpe", n_trials=len(draws),
                                axes={"optim.lr": {"low": 1e-6, "high": 1e-3, "log": True}}))
    study = optuna.create_study(direction="maximize")
    dist = {"optim.lr": optuna.distributions.FloatDistribution(1e-6, 1e-3, log=True)}
    for lr, seed, acc in draws:
        attrs = {"arm": arm_label(spec.axes, {"optim.lr": lr}), "seed": seed,
                 "point": point_key({"optim.lr": lr}, seed), "metrics": {"val/acc": acc}}
        study.add_trial(optuna.trial.create_trial(params={"optim.lr": lr}, distributions=dist, value=acc,
                                                  user_attrs=attrs))
    return spec, study


def test_sampled_points_that_print_alike_are_not_pooled(tmp_path):
    """lr 0.00012341 and 0.00012344 both print lr=0.0001234: the table averaged two configs as seeds of one arm."""
    spec, study = _sampled_study(tmp_path, [(0.00012341, 0, 0.8), (0.00012344, 1, 0.6), (0.00012341, 1, 0.82),
                                            (5e-05, 0, 0.7)])
    records = load_records(spec, study)
    assert [r.arm for r in records] == ["lr=0.00012341", "lr=0.00012344", "lr=0.00012341", "lr=5e-05"]
    df = summarize(records, "val/acc", [], "maximize", None).set_index("arm")
    assert df["n"].to_dict() == {"lr=0.00012341": 2, "lr=0.00012344": 1, "lr=5e-05": 1}
    assert abs(df.loc["lr=0.00012341", "val/acc mean"] - 0.81) < 1e-12


def test_a_pipe_in_an_arm_or_metric_keeps_the_markdown_columns():
    records = [TrialRecord(arm, s, "COMPLETE", {"m|x": 0.1 * s}) for arm in ("pat=a|b", "pat=c") for s in (0, 1)]
    md = to_markdown(summarize(records, "m|x", [], "maximize", "pat=c"), "m|x", [], "pat=c")
    widths = {len(line.replace("\\|", "").split("|")) for line in md.splitlines() if line.startswith("|")}
    assert widths == {8} and "pat=a\\|b" in md  # 6 cells a row


def test_a_sweep_without_trials_has_an_empty_table(tmp_path):
    spec = load_spec(write_spec(tmp_path))
    df = write_comparison([], spec, None, None, tmp_path / "cmp")
    assert df.empty and "val/acc mean" in df.columns
    assert pd.read_csv(tmp_path / "cmp" / "table.csv").empty
    assert (tmp_path / "cmp" / "table.md").read_text().count("\n") == 2  # the header only


def test_pruned_trials_are_drawn_apart_from_the_mean(tmp_path):
    records = _records(tmp_path, n_seeds=2)
    pruned_dir = tmp_path / "ppo-pruned" / "csv"
    pruned_dir.mkdir(parents=True)
    pruned_dir.joinpath("metrics.csv").write_text("step,val/acc\n10,0.9\n")
    records.append(TrialRecord("ppo", 7, "PRUNED", {}, str(pruned_dir.parent)))
    ppo = arm_curves(records, "val/acc", ["ppo", "gppo", "cispo"])["ppo"]
    assert list(ppo["n"]) == [2, 2, 2]  # the pruned curve stopped at step 10 and used to pull its mean up
    from klear_lab.sweep.curves import plot_curves

    png = plot_curves(records, ["val/acc"], tmp_path / "curves.png", ["ppo", "gppo", "cispo"])
    assert png is not None and png.read_bytes()[:4] == b"\x89PNG"


def test_a_metric_listed_twice_is_one_column():
    df = summarize(_records(), "val/acc", ["train/loss", "train/loss", "val/acc"], "maximize", "ppo")
    md = to_markdown(df, "val/acc", ["train/loss", "train/loss"], "ppo")
    assert md.splitlines()[0].startswith("| arm | val/acc | train/loss | Δ val/acc")


def test_arms_without_spread_get_no_bootstrap_interval():
    """[.5, .5] against [.6, .6]: the bootstrap "interval" [+0.1, +0.1] read as certain, where Welch gave none."""
    records = [TrialRecord(arm, s, "COMPLETE", {"m": v}) for arm, v in (("a", 0.5), ("b", 0.6)) for s in (0, 1)]
    d, lo, hi = bootstrap_diff(np.array([0.6, 0.6]), np.array([0.5, 0.5]))
    assert abs(d - 0.1) < 1e-12 and math.isnan(lo) and math.isnan(hi)
    assert not math.isnan(bootstrap_diff(np.array([0.6, 0.7]), np.array([0.5, 0.5]))[1])  # one arm varies
    md = to_markdown(summarize(records, "m", [], "maximize", "a", ["a", "b"]), "m", [], "a")
    assert "+0.1 (no spread: neither arm varies across its seeds: no interval)" in md and "[+0.1, +0.1]" not in md


def test_arms_tied_with_the_best_are_all_marked():
    values = {"a": [0.5, 0.5], "b": [0.6, 0.6], "c": [np.float32(0.6).item()] * 2, "d": [0.3, 0.3]}
    records = [TrialRecord(arm, s, "COMPLETE", {"m": v}) for arm, vs in values.items() for s, v in enumerate(vs)]
    assert summarize(records, "m", [], "maximize", "a").loc[lambda df: df["best"], "arm"].tolist() == ["b", "c"]
    assert summarize(records, "m", [], "minimize", "a").loc[lambda df: df["best"], "arm"].tolist() == ["d"]


def test_the_few_seeds_note_follows_the_smallest_arm():
    rng = np.random.default_rng(0)
    many = [TrialRecord(arm, s, "COMPLETE", {"m": mu + 0.01 * rng.standard_normal()})
            for arm, mu in (("a", 0.5), ("b", 0.6)) for s in range(10)]
    df = summarize(many, "m", [], "maximize", "a", ["a", "b"])
    assert "Bootstrap intervals" not in to_markdown(df, "m", [], "a")
    few = many + [TrialRecord("c", s, "COMPLETE", {"m": 0.4 + s / 100}) for s in range(3)]
    md = to_markdown(summarize(few, "m", [], "maximize", "a", ["a", "b", "c"]), "m", [], "a")
    assert "Bootstrap intervals over 3 seed(s) per arm" in md


def test_training_metrics_of_one_batch_are_noted_under_the_table():
    """A sweep's table showed ``rl/kept_group_frac 0`` for an arm that kept 0.75 of its groups at earlier
    steps: a training metric's final value is its last step's batch."""
    records = [TrialRecord(arm, s, "COMPLETE", {"val/acc": 0.5 + s / 10, "rl/kept_group_frac": 0.0,
                                                "reward/acc": 0.25, "val/gain": 0.1, "rl/rollout_steps": 3.0})
               for arm in ("a", "b") for s in range(2)]
    metrics = ["val/gain", "reward/acc", "rl/kept_group_frac", "rl/rollout_steps"]
    md = to_markdown(summarize(records, "val/acc", metrics, "maximize", "a", ["a", "b"]), "val/acc", metrics, "a")
    assert ("reward/acc, rl/kept_group_frac: each seed's last logged value, from one training batch, not a mean "
            "over the run; the curves PNG draws them over the run.") in md
    plain = to_markdown(summarize(records, "val/acc", ["val/gain"], "maximize", "a", ["a", "b"]), "val/acc",
                        ["val/gain"], "a")
    assert "one batch" not in plain


def test_seeds_logged_at_different_steps_are_averaged_in_step_order(tmp_path):
    """The steps kept the order they first appeared in (the line ran 60 -> 10), and a step one seed alone
    logged drew that seed's value with a zero band (found by a review)."""
    records = []
    for seed, points in enumerate(([(20, 0.2), (40, 0.4), (60, 0.6)], [(10, 0.1), (30, 0.3), (50, 0.5), (70, 0.7)])):
        run_dir = tmp_path / f"a-{seed}"
        (run_dir / "csv").mkdir(parents=True)
        text = "step,val/acc\n" + "".join(f"{s},{v}\n" for s, v in points)
        (run_dir / "csv" / "metrics.csv").write_text(text)
        records.append(TrialRecord("a", seed, "COMPLETE", {"val/acc": points[-1][1]}, str(run_dir)))
    curve = arm_curves(records, "val/acc")["a"]
    assert list(curve["step"]) == [20, 30, 40, 50, 60]  # where both seeds have a value (each interpolated)
    assert list(curve["n"]) == [2] * 5
    np.testing.assert_allclose(curve["mean"], [0.2, 0.3, 0.4, 0.5, 0.6])


def _write_curve(tmp_path, arm, seed, points):
    run_dir = tmp_path / f"{arm}-{seed}"
    (run_dir / "csv").mkdir(parents=True)
    (run_dir / "csv" / "metrics.csv").write_text("step,val/acc\n" + "".join(f"{s},{v}\n" for s, v in points))
    return TrialRecord(arm, seed, "COMPLETE", {"val/acc": points[-1][1]}, str(run_dir))


def test_seeds_that_share_no_step_give_no_mean_curve(tmp_path):
    """Seed 0 logged steps 0 and 10, seed 1 steps 20 and 30: the rows with the most seeds were kept, each
    with one seed, and the "mean" curve hopped from seed to seed (0, 1, 5, 6) with std 0 (found by a review)."""
    points = {("a", 0): [(0, 0.0), (10, 1.0)], ("a", 1): [(20, 5.0), (30, 6.0)],
              ("b", 0): [(0, 0.0), (20, 2.0)], ("b", 1): [(10, 3.0), (30, 3.0)]}
    records = [_write_curve(tmp_path, arm, seed, p) for (arm, seed), p in points.items()]
    curves = arm_curves(records, "val/acc", ["a", "b"])
    assert curves["a"].empty  # no step where both seeds have a value: no curve, not a fake mean
    assert list(curves["b"]["step"]) == [10, 20] and list(curves["b"]["n"]) == [2, 2]  # overlap of 10..20 and 10..30
    np.testing.assert_allclose(curves["b"]["mean"], [(1.0 + 3.0) / 2, (2.0 + 3.0) / 2])
    from rich.console import Console

    spec = load_spec(write_spec(tmp_path))
    spec.metrics = []
    console = Console(record=True, width=200)
    write_comparison(records, spec, "b", ["a", "b"], tmp_path / "cmp", console)
    assert (tmp_path / "cmp" / "curves.png").is_file()
    note = "note: curves: val/acc: no mean curve for a (their seeds logged it at no common step)"
    assert note in console.export_text()


@pytest.mark.parametrize("bad", ["nan", "inf"])
def test_a_diverged_seed_is_drawn_apart_not_averaged_into_the_arm(tmp_path, bad):
    """A seed that logged inf ended the arm's mean curve at that step (the mean was inf); one that logged "nan"
    was read as not logged, and the arm's curve stopped where it did. The table gives such a seed no value."""
    records = [_write_curve(tmp_path, "a", 0, [(0, 0.1), (10, 0.2), (20, 0.3)]),
               _write_curve(tmp_path, "a", 1, [(0, 0.3), (10, 0.4), (20, 0.5)]),
               _write_curve(tmp_path, "a", 2, [(0, 0.2), (10, bad), (20, bad)])]
    assert str(read_curve(records[2].run_dir, "val/acc")[20]) == bad  # logged, not missing
    curve = arm_curves(records, "val/acc")["a"]
    assert list(curve["step"]) == [0, 10, 20] and list(curve["n"]) == [2, 2, 2]
    np.testing.assert_allclose(curve["mean"], [0.2, 0.3, 0.4])
    from klear_lab.sweep.curves import plot_curves

    notes: list[str] = []
    assert plot_curves(records, ["val/acc"], tmp_path / "curves.png", ["a"], notes).is_file()
    assert notes == ["val/acc: a: 1 seed(s) logged a non-finite value (diverged): drawn dashed, not in the mean"]


def test_the_curves_read_each_trials_file_once_and_again_after_it_changes(tmp_path, monkeypatch):
    """The PNG read every trial's metrics.csv once per metric for the mean, once more for the diverged seeds
    and once per arm for the pruned ones: 2 metrics over 3 trials read 12 files, not 3."""
    from klear_lab.sweep import curves

    records = [_write_curve(tmp_path, arm, seed, [(0, 0.1 * seed), (10, 0.2)]) for arm, seed in
               (("a", 0), ("a", 1), ("b", 0))]
    reads: list[str] = []
    read_csv = pd.read_csv
    monkeypatch.setattr(pd, "read_csv", lambda path, **kw: reads.append(str(path)) or read_csv(path, **kw))
    assert curves.plot_curves(records, ["val/acc", "train/loss"], tmp_path / "c.png", ["a", "b"]).is_file()
    assert sorted(reads) == sorted(f"{r.run_dir}/csv/metrics.csv" for r in records)
    changed = Path(records[0].run_dir) / "csv" / "metrics.csv"
    changed.write_text(changed.read_text() + "20,0.9\n")  # a running trial's file grows: read again
    assert curves.read_curve(records[0].run_dir, "val/acc").to_dict() == {0: 0.0, 10: 0.2, 20: 0.9}


def test_a_word_in_a_custom_runners_metrics_file_is_no_value_not_a_divergence(tmp_path):
    """With "nan" read as logged (a diverged run), "NA" or "None" from a custom runner's CSV read as NaN too,
    and the seed was drawn as diverged."""
    record = _write_curve(tmp_path, "a", 0, [(0, 0.1), (10, "NA"), (20, "None"), (30, 0.4), (40, "-inf")])
    curve = read_curve(record.run_dir, "val/acc")
    assert list(curve.index) == [0, 30, 40] and curve[40] == float("-inf")


def test_a_table_without_a_baseline_has_no_delta_columns(tmp_path):
    """The header read "Δ val/acc vs None" (a sweep with no arm to be the baseline yet)."""
    df = summarize(_records(), "val/acc", [], "maximize", None, ["ppo", "gppo", "cispo"])
    md = to_markdown(df, "val/acc", [], None)
    header = md.splitlines()[0]
    assert header == "| arm | val/acc | pruned | failed |" and "None" not in md
    assert all(line.count("|") == 5 for line in md.splitlines()[:5])  # 4 cells per row, as the header
    from rich.console import Console

    console = Console(record=True, width=200)
    write_comparison(_records(), load_spec(write_spec(tmp_path)), None, None, tmp_path / "cmp", console)
    text = console.export_text()
    assert "None" not in text and "Δ val/acc" not in text and "no baseline" in text
    with_base = to_markdown(summarize(_records(), "val/acc", [], "maximize", "ppo"), "val/acc", [], "ppo")
    assert "Δ val/acc vs ppo [bootstrap 95% CI] | Welch t 95% CI |" in with_base.splitlines()[0]


def test_a_seed_a_sampler_ran_twice_counts_once():
    """tpe/random draw an arm again and run a seed again (the same config and seed: the same run); the table
    counted each as a seed: n=3 and a std of one measurement, and an arm complete on a seed it lacked."""
    ran = [("a", 0, "COMPLETE", 0.1), ("b", 0, "COMPLETE", 0.2), ("a", 0, "COMPLETE", 0.1), ("b", 1, "COMPLETE", 0.4),
           ("b", 1, "PRUNED", None), ("a", 1, "PRUNED", None), ("a", 1, "PRUNED", None)]
    records = [TrialRecord(arm, seed, state, {"m": v} if v is not None else {}, number=i)
               for i, (arm, seed, state, v) in enumerate(ran)]
    df = summarize(records, "m", [], "maximize", "a").set_index("arm")
    assert (df.loc["a", "n"], df.loc["a", "m n"], df.loc["a", "pruned"]) == (1, 1, 1)
    assert math.isnan(df.loc["a", "m std"])  # one measurement: no spread
    assert (df.loc["b", "n"], df.loc["b", "pruned"]) == (2, 0) and df.loc["b", "m mean"] == pytest.approx(0.3)
    assert not df.loc["a", "best"] and df.loc["b", "best"]  # a lacks seed 1 (pruned): not complete


def test_records_of_a_seed_that_ran_twice_are_one_for_reproduce_too(tmp_path):
    """The table counted a seed once, but ``klear-lab reproduce`` read the records as loaded: seed 0 run twice
    was two seeds in its verdicts and intervals. ``load_records`` now keeps one completed trial per seed."""
    from klear_lab.analysis.reproduce import objective_values

    spec, study = _sampled_study(tmp_path, [(0.001, 0, 0.5), (0.001, 0, 0.5), (0.001, 1, 0.6)])
    records = load_records(spec, study)
    assert sorted(objective_values(records, "lr=0.001", "val/acc")) == [0.5, 0.6]


def test_an_arm_of_a_continuous_random_sweep_is_complete_with_its_one_seed(tmp_path):
    """Over a float range each tpe/random arm is a point drawn once, with one seed: the star's note called the
    best "starred on 1 of 2 seeds ... (1 seed not finished)" for a seed it would never get."""
    from klear_lab.sweep.best import best_notes
    from klear_lab.sweep.compare import arm_seeds

    ranged = {"optim.lr": {"low": 1e-4, "high": 1e-2, "log": True}}
    spec = load_spec(write_spec(tmp_path, seeds=(0, 1), sampler="random", n_trials=2, axes=ranged))
    assert arm_seeds(spec) == 1
    assert arm_seeds(load_spec(write_spec(tmp_path, name="grid", seeds=(0, 1)))) is None
    records = [TrialRecord("lr=0.001", 0, "COMPLETE", {"val/acc": 0.5}), TrialRecord("lr=0.002", 1, "COMPLETE",
                                                                                     {"val/acc": 0.6})]
    df = summarize(records, "val/acc", [], "maximize", "lr=0.001", seeds_per_arm=arm_seeds(spec))
    assert list(df["best"]) == [False, True] and best_notes(df) == []
    before = summarize(records, "val/acc", [], "maximize", "lr=0.001")
    assert "1 seed not finished" in best_notes(before)[0]
