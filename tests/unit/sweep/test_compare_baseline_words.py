"""What a tpe/random sweep's baseline errors and the printed table say about the baseline: a ``--baseline``
mapping echoed as YAML, a value no draw can take "cannot be drawn" (and why), a spec mapping "was not sampled"
rather than "not a grid point", a label finer than the arms' 4 digits read as numbers, and a line under the
printed table naming where its baseline came from."""

from __future__ import annotations

import pytest
from rich.console import Console
from sweep_fixtures import sampled_study, write_spec

from klear_lab.errors import ConfigError
from klear_lab.sweep.baseline_checks import check_drawable_baseline, check_label_hint
from klear_lab.sweep.compare import TrialRecord, compare_study, table_arms, write_comparison
from klear_lab.sweep.grid import arm_label, point_key
from klear_lab.sweep.spec import load_spec, with_baseline

FINE = {"optim.lr": {"low": 0.00012, "high": 0.00013, "step": 1e-8}}  # 1001 points; labels keep 4 digits
ZERO = {"rl.alpha": {"low": -0.3, "high": 0.3, "step": 0.1}}  # Optuna draws its 0 as -0.3 + 3 * 0.1: 5.55e-17


def _records(spec, points):
    """One COMPLETE trial per axis-values mapping of ``points``, labelled as a trial labels itself."""
    return [TrialRecord(arm_label(spec.axes, p), 0, "COMPLETE", {"val/acc": float(i)}, point=point_key(p, 0))
            for i, p in enumerate(points)]


def test_an_unsampled_cli_mapping_is_echoed_as_yaml(tmp_path):
    """It read ``--baseline {optim.lr: 0.001, trainer.deterministic: False}``, Python's spelling."""
    axes = {"optim.lr": [0.001, 0.002], "trainer.deterministic": [False, True]}
    spec = load_spec(write_spec(tmp_path, sampler="random", n_trials=2, axes=axes))
    records = _records(spec, [{"optim.lr": 0.002, "trainer.deterministic": True}])
    cli = with_baseline(spec, "{optim.lr: 1e-3, trainer.deterministic: false}")
    with pytest.raises(ConfigError) as exc:
        table_arms(cli, records)
    assert str(exc.value).startswith("--baseline {optim.lr: 0.001, trainer.deterministic: false}: no arm the sweep "
                                     "sampled is labelled")


@pytest.mark.parametrize(("text", "said"), [
    ("{optim.lr: 0.005}", "optim.lr: 0.005 cannot be drawn: it is not one of the axis's values (0.001, 0.002, 0.003)"),
    ("lr=0.005", "optim.lr: 0.005 cannot be drawn: it is not one of the axis's values (0.001, 0.002, 0.003)"),
])
def test_a_cli_baseline_no_draw_can_take_cannot_be_drawn(tmp_path, text, said):
    """It was "no arm the sweep sampled is labelled ...", as if more trials might draw it."""
    spec, study = sampled_study(tmp_path, [(0.002, 0)])
    with pytest.raises(ConfigError, match=f"^--baseline {text}: ") as exc:
        compare_study(with_baseline(spec, text), study, console=Console(record=True))
    assert str(exc.value).endswith(said)


@pytest.mark.parametrize(("text", "why"), [
    ("{optim.lr: 0.0015}", "0.0015 cannot be drawn: it is not on the axis's grid (low 0.001 plus a multiple of "
                           "step 0.001)"),
    ("lr=0.0015", "0.0015 cannot be drawn: it is not on the axis's grid"),
    ("{optim.lr: 0.005}", "0.005 cannot be drawn: it is outside the axis's range [0.001, 0.003]"),
])
def test_a_cli_baseline_off_a_ranges_step_or_bounds_cannot_be_drawn(tmp_path, text, why):
    axes = {"optim.lr": {"low": 0.001, "high": 0.003, "step": 0.001}}
    spec = load_spec(write_spec(tmp_path, sampler="random", n_trials=2, axes=axes))
    with pytest.raises(ConfigError, match=f"^--baseline {text}: optim.lr: ") as exc:
        with_baseline(spec, text)  # before the study is read
    assert why in str(exc.value)
    assert with_baseline(spec, "lr=0.002").baseline == "lr=0.002"


def test_a_spec_mapping_baseline_is_not_called_a_grid_point(tmp_path):
    spec, study = sampled_study(tmp_path, [(0.002, 0), (0.003, 0)], baseline={"optim.lr": 0.005})
    with pytest.raises(ConfigError) as exc:
        compare_study(spec, study, console=Console(record=True))
    assert "grid point" not in str(exc.value)
    assert "baseline.optim.lr: 0.005 is not one of the axis's values (0.001, 0.002, 0.003)" in str(exc.value)


def test_a_label_finer_than_4_digits_is_read_as_numbers(tmp_path):
    """``lr=0.00012345`` is on the step grid but was refused: the drawable arms' labels keep 4 digits."""
    spec = load_spec(write_spec(tmp_path, sampler="random", n_trials=2, axes=FINE, baseline="lr=0.00012345"))
    check_label_hint(spec)
    check_drawable_baseline(spec)
    spec.baseline = "lr=0.000123455"
    with pytest.raises(ConfigError, match=r"no arm sampler random can draw is labelled 'lr=0.000123455'.*"
                                          r"\(lr: 0.000123455 is not on the axis's grid"):
        check_drawable_baseline(spec)


def test_a_finer_label_or_mapping_finds_the_arm_drawn_there(tmp_path):
    """The arm drawn at 0.00012345 is labelled lr=0.0001234: its finer label found no row ("never sampled")."""
    spec = load_spec(write_spec(tmp_path, sampler="random", n_trials=2, axes=FINE, baseline="lr=0.00012345"))
    drawn = 0.00012 + 345 * 1e-8  # as a step grid computes it: 0.00012344999999999999
    records = _records(spec, [{"optim.lr": drawn}, {"optim.lr": 0.00013}])
    assert table_arms(spec, records) == (None, "lr=0.0001234")
    assert table_arms(with_baseline(spec, "{optim.lr: 1.2345e-4}"), records)[1] == "lr=0.0001234"
    spec.baseline = "lr=0.00013"
    assert table_arms(spec, records)[1] == "lr=0.00013"


def _shown(spec, records, baseline, order, tmp_path):
    console = Console(record=True, width=300)
    write_comparison(records, spec, baseline, order, tmp_path / "cmp", console)
    return console.export_text(), (tmp_path / "cmp" / "table.md").read_text()


def test_the_printed_table_says_where_its_baseline_came_from(tmp_path):
    grid = load_spec(write_spec(tmp_path, lrs=(0.001, 0.002)))
    records = _records(grid, [{"optim.lr": 0.001}, {"optim.lr": 0.002}])
    text, md = _shown(grid, records, "lr=0.001", ["lr=0.001", "lr=0.002"], tmp_path)
    assert "baseline: lr=0.001 (the grid's first arm: the spec has no `baseline:`)" in text
    assert "baseline: lr=" not in md  # table.md as before
    spec, study = sampled_study(tmp_path, [(0.002, 0), (0.003, 0)])
    console = Console(record=True, width=300)
    compare_study(spec, study, console=console)
    assert "baseline: lr=0.002 (the sampled arm whose label sorts first: the spec has no `baseline:`)" \
        in console.export_text()
    spec.baseline = "lr=0.003"
    compare_study(spec, study, console=(console := Console(record=True, width=300)))
    assert f"baseline: lr=0.003 (`baseline:` of {spec.path})" in console.export_text()
    compare_study(with_baseline(spec, "lr=0.002"), study, console=(console := Console(record=True, width=300)))
    said = console.export_text()  # the note the table has had says it: no second line
    assert "baseline lr=0.002: from --baseline" in said and "baseline: lr=0.002 (" not in said


@pytest.mark.parametrize("baseline", ["alpha=0", {"rl.alpha": 0}])
def test_a_zero_drawn_as_float_noise_is_the_baseline_arm(tmp_path, baseline):
    """A range crossing zero draws its 0 as 5.551115123125783e-17 (labelled alpha=5.551e-17): a relative
    tolerance alone called it never sampled, and refused ``--baseline alpha=0``."""
    spec = load_spec(write_spec(tmp_path, sampler="random", n_trials=3, axes=ZERO, baseline=baseline))
    records = _records(spec, [{"rl.alpha": -0.3 + i * 0.1} for i in (0, 3, 4)])  # 0.10000000000000003 at i=4
    assert [r.arm for r in records] == ["alpha=-0.3", "alpha=5.551e-17", "alpha=0.1"]
    assert table_arms(spec, records)[1] == "alpha=5.551e-17"
    for text in ("alpha=0", "{rl.alpha: 0}", "{rl.alpha: 0.0}"):
        assert table_arms(with_baseline(spec, text), records)[1] == "alpha=5.551e-17"
    assert table_arms(with_baseline(spec, "{rl.alpha: 0.1}"), records)[1] == "alpha=0.1"
    with pytest.raises(ConfigError, match=r"^--baseline alpha=-0.1: no arm the sweep sampled"):
        table_arms(with_baseline(spec, "alpha=-0.1"), records)  # a step away: another point


def test_a_baseline_no_sampled_point_has_is_never_matched_by_a_rounded_label(tmp_path, capsys):
    """0.00012345 was not sampled, 0.00012341 was (labelled lr=0.0001234, as 0.00012345 is): the mapping
    baseline took that arm's row, silently."""
    spec = load_spec(write_spec(tmp_path, sampler="random", n_trials=2, axes=FINE,
                                baseline={"optim.lr": 0.00012345}))
    records = _records(spec, [{"optim.lr": 0.00012 + 341 * 1e-8}, {"optim.lr": 0.00013}])
    assert table_arms(spec, records)[1] == "lr=0.00012345"  # no sampled arm's label
    text, _ = _shown(spec, records, "lr=0.00012345", None, tmp_path)
    assert "baseline arm lr=0.00012345 was never sampled: no deltas" in text
    with pytest.raises(ConfigError, match=r"^--baseline \{optim.lr: 0.00012345\}: no arm the sweep sampled is "
                                          r"labelled 'lr=0.00012345'; sampled arms \(2\): lr=0.0001234, lr=0.00013"):
        table_arms(with_baseline(spec, "{optim.lr: 0.00012345}"), records)
    for r in records:  # trials that recorded no point (a study from before): their label is all there is
        r.point = None
    assert table_arms(spec, records)[1] == "lr=0.0001234"


@pytest.mark.parametrize(("axes", "baseline", "said"), [
    ({"trainer.deterministic": [False, True]}, "deterministic=false",
     "(deterministic: false is not one of the axis's values (False, True))"),
    ({"trainer.deterministic": [False, True]}, {"trainer.deterministic": "no"},
     "baseline.trainer.deterministic: 'no' is not one of the axis's values (false, true): sampler random"),
    ({"optim.lr": {"values": [0.001, 0.002], "labels": ["small", "big"]}}, "lr=huge",
     "(lr: huge is not one of the axis's labels (small, big))"),
])
def test_a_baseline_no_draw_can_take_is_said_as_the_user_writes_it(tmp_path, axes, baseline, said):
    """It said ``deterministic: 'false'``, and ``values (False, True)`` for a mapping: Python's spellings; and an
    axis's values where a label names its labels."""
    spec = load_spec(write_spec(tmp_path, sampler="random", n_trials=2, axes=axes, baseline=baseline))
    with pytest.raises(ConfigError) as exc:
        check_drawable_baseline(spec)
    assert said in str(exc.value)
