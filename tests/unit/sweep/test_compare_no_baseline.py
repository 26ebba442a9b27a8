"""A table without a baseline (a tpe/random sweep with no trial and no ``baseline:``): no delta columns in
``table.csv`` either, and no "baseline None" in a rescore's title; with a baseline the CSV keeps them."""

from __future__ import annotations

import optuna
import pandas as pd
from rich.console import Console
from sweep_fixtures import write_spec

from klear_lab.sweep.compare import DELTA_COLUMNS, TrialRecord, compare_study, write_comparison
from klear_lab.sweep.spec import load_spec


def _empty_sampled(tmp_path):
    """A random-sampler sweep with no ``baseline:`` and a study with no trial yet: its table has no baseline."""
    spec = load_spec(write_spec(tmp_path, sampler="random", n_trials=2))
    return spec, optuna.create_study(direction="maximize")


def test_without_a_baseline_the_csv_has_no_delta_columns_like_the_markdown(tmp_path):
    """table.csv kept five empty delta columns that table.md and the Rich table drop."""
    spec, study = _empty_sampled(tmp_path)
    console = Console(record=True, width=200)
    df = compare_study(spec, study, console=console)
    assert df.empty and "no baseline" in console.export_text()
    csv = pd.read_csv(spec.sweep_dir / "compare" / "table.csv")
    assert not set(DELTA_COLUMNS) & set(csv.columns) and "val/acc mean" in csv.columns
    assert "Δ" not in (spec.sweep_dir / "compare" / "table.md").read_text()


def test_rows_without_a_baseline_also_drop_them_and_keep_the_rest(tmp_path):
    spec = load_spec(write_spec(tmp_path))
    records = [TrialRecord(arm, s, "COMPLETE", {"val/acc": v + s / 100}) for arm, v in (("a", 0.5), ("b", 0.6))
               for s in (0, 1)]
    write_comparison(records, spec, None, ["a", "b"], tmp_path / "cmp", Console(record=True, width=200))
    csv = pd.read_csv(tmp_path / "cmp" / "table.csv").set_index("arm")
    assert not set(DELTA_COLUMNS) & set(csv.columns)
    assert abs(csv.loc["b", "val/acc mean"] - 0.605) < 1e-12 and csv["n"].tolist() == [2, 2]


def test_with_a_baseline_the_csv_keeps_its_delta_columns(tmp_path):
    spec = load_spec(write_spec(tmp_path))
    records = [TrialRecord(arm, s, "COMPLETE", {"val/acc": v + s / 100}) for arm, v in (("a", 0.5), ("b", 0.6))
               for s in (0, 1)]
    write_comparison(records, spec, "a", ["a", "b"], tmp_path / "cmp", Console(record=True, width=200))
    csv = pd.read_csv(tmp_path / "cmp" / "table.csv").set_index("arm")
    assert set(DELTA_COLUMNS) <= set(csv.columns)
    assert abs(csv.loc["b", "delta"] - 0.1) < 1e-12
    assert csv.loc["b", "welch ci low"] < 0.1 < csv.loc["b", "welch ci high"]
    assert csv.loc["a", "baseline"] and not csv.loc["b", "baseline"]


def test_a_rescore_without_a_baseline_does_not_title_it_none(tmp_path):
    """The table of ``compare --rescore`` of a sampled sweep without a baseline printed "baseline None" in its
    title (a rescore of a sweep with no finished trial is refused now: the table is written directly)."""
    from klear_lab.sweep.rescore import write_table

    spec, _ = _empty_sampled(tmp_path)
    console = Console(record=True, width=200)
    df = write_table(spec, [], ["eval.samples=2", "eval.temperature=0.6"], {}, console)
    text = " ".join(console.export_text().split())  # Rich wraps the title to the table's width
    assert df.empty
    assert "baseline None" not in text
    assert "rescored (eval.samples=2 eval.temperature=0.6): val/acc, no baseline" in text
    (out_dir,) = spec.sweep_dir.glob("rescore-*")
    assert not set(DELTA_COLUMNS) & set(pd.read_csv(out_dir / "table.csv").columns)


def test_a_rescore_with_a_baseline_names_it_in_the_title(tmp_path):
    from klear_lab.sweep.rescore import write_table

    spec = load_spec(write_spec(tmp_path))  # a grid: its first arm is the baseline
    console = Console(record=True, width=200)
    records = [TrialRecord("lr=0.001", 0, "COMPLETE", {"val/acc": 0.5}), TrialRecord("lr=0.002", 0, "COMPLETE",
                                                                                    {"val/acc": 0.6})]
    write_table(spec, records, ["eval.samples=2"], {}, console)
    text = " ".join(console.export_text().split())
    assert "rescored (eval.samples=2): val/acc, baseline lr=0.001" in text
    assert "baseline: lr=0.001 (the grid's first arm: the spec has no `baseline:`)" in text  # as compare's table


def test_a_rescore_of_a_training_curve_objective_compares_its_held_out_counterpart(tmp_path):
    """An evaluation logs no ``val/aime24/acc_last5`` (Figure 2's objective): every objective cell, delta and
    star of the rescored table was empty, with no word (found by a review). A drawdown's minimize does not
    carry over to the accuracy compared in its place."""
    import dataclasses

    from klear_lab.sweep.rescore import write_table

    base = load_spec(write_spec(tmp_path))
    records = [TrialRecord(arm, s, "COMPLETE", {"val/acc": v + s / 100, "val/aime24/acc": v + s / 10})
               for arm, v in (("lr=0.001", 0.5), ("lr=0.002", 0.6)) for s in (0, 1)]
    for objective, direction, compared in (("val/aime24/acc_last5", "maximize", "val/aime24/acc"),
                                           ("val/acc_drawdown", "minimize", "val/acc")):
        spec = dataclasses.replace(base, metric=objective, direction=direction)
        console = Console(record=True, width=300)
        df = write_table(spec, records, ["eval.samples=2"], {}, console).set_index("arm")
        text = " ".join(console.export_text().split())
        assert f"rescored (eval.samples=2): {compared}, baseline lr=0.001" in text, text
        assert f"the sweep's objective {objective} is not something one evaluation logs" in text
        assert abs(df.loc["lr=0.002", "delta"] - 0.1) < 1e-9 and df.loc["lr=0.002", "best"]  # higher is better
