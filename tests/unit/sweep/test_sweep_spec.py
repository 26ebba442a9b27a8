"""Sweep spec parsing and pre-flight checks: every error names the spec file and the key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import yaml
from sweep_fixtures import write_spec

from klear_lab.errors import ConfigError
from klear_lab.sweep.checks import check_spec
from klear_lab.sweep.grid import grid_arms
from klear_lab.sweep.spec import load_spec


def _edit(path, **changes):
    body = yaml.safe_load(path.read_text())
    for key, value in changes.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def _error(path, overrides=None) -> str:
    with pytest.raises(ConfigError) as exc:
        check_spec(load_spec(path, overrides))
    assert str(path) in str(exc.value)
    return str(exc.value)


def test_valid_spec_gives_grid_arms(tmp_path):
    spec = load_spec(write_spec(tmp_path, seeds=(0, 1)))
    arms = check_spec(spec)
    assert [a.label for a in arms] == ["lr=0.001", "lr=0.002", "lr=0.003"]
    assert spec.name == "toy" and spec.seeds == [0, 1] and spec.sampler == "grid"
    assert spec.sweep_dir == tmp_path / "out" / "toy"


def test_unknown_top_level_key(tmp_path):
    assert "unknown key 'axis'" in _error(_edit(write_spec(tmp_path), axis={"optim.lr": [1]}))


def test_a_misspelt_top_level_key_gets_a_did_you_mean(tmp_path):
    """``seedz:`` was refused with the list of allowed keys only, unlike a misspelt experiment key."""
    path = write_spec(tmp_path)
    assert "unknown key 'seedz' (did you mean 'seeds'?); allowed: axes," in _error(_edit(path, seedz=[0, 1]))
    assert "unknown key 'zzz'; allowed:" in _error(_edit(path, seedz=None, zzz=1))  # nothing near: no guess


@pytest.mark.parametrize(("body", "said"), [
    ({"valuse": [0.1, 0.2]}, "axes.optim.lr: unknown key 'valuse' (did you mean 'values'?); allowed: values, labels,"),
    ({"valuse": [0.1, 0.2], "labels": ["a", "b"]},  # labels itself is no unknown key (it sorts first)
     "axes.optim.lr: unknown key 'valuse' (did you mean 'values'?)"),
    ({"low": 0.1, "hihg": 0.2}, "axes.optim.lr: unknown key 'hihg' (did you mean 'high'?); allowed: low, high, log, "
                                "step"),
    ({"values": [0.1], "lables": ["a"]}, "axes.optim.lr: unknown key 'lables' (did you mean 'labels'?); allowed: "
                                         "values, labels"),
    ({"low": 0.1, "high": 0.2, "zzz": 1}, "axes.optim.lr: unknown key 'zzz'; allowed: low, high, log, step"),
])
def test_a_misspelt_key_in_an_axis_body_gets_a_did_you_mean(tmp_path, body, said):
    """``{valuse: [...]}`` was refused as "a range needs low and high", ``{low, hihg}`` the same: no hint."""
    assert said in _error(_edit(write_spec(tmp_path), axes={"optim.lr": body}))


@pytest.mark.parametrize(("objective", "said"), [
    ({"metric": "val/acc", "direcion": "minimize"},
     "objective: unknown key 'direcion' (did you mean 'direction'?); allowed: metric, direction"),
    ({"metrc": "val/acc"}, "objective: unknown key 'metrc' (did you mean 'metric'?)"),  # was "expected {metric: ..."
])
def test_a_misspelt_objective_key_gets_a_did_you_mean(tmp_path, objective, said):
    assert said in _error(_edit(write_spec(tmp_path), objective=objective))


@pytest.mark.parametrize("objective", ["train/loss", {"metric": "train/loss"}, {"metric": "val/acc_drawdown"}])
def test_an_objective_that_is_no_accuracy_needs_its_direction(tmp_path, objective):
    """``objective: train/loss`` was maximized (the default): the table starred the worst arm, a pruner pruned
    the best trials (found by a new-user walkthrough)."""
    metric = objective if isinstance(objective, str) else objective["metric"]
    assert f"objective: {metric!r} has no direction, and the default, maximize, would pick the arm with the " \
           f"highest; give it: {{metric: {metric}, direction: minimize}}" in _error(
               _edit(write_spec(tmp_path), objective=objective))
    load_spec(_edit(write_spec(tmp_path), objective={"metric": metric, "direction": "minimize"}))
    load_spec(_edit(write_spec(tmp_path), objective="val/acc"))  # an accuracy: maximize, as before


def test_a_misspelt_wandb_key_gets_a_did_you_mean(tmp_path):
    """It said "wandb: expected {project, group}, got {'projet': 'p'}"."""
    msg = _error(_edit(write_spec(tmp_path), wandb={"projet": "p"}))
    assert "wandb: unknown key 'projet' (did you mean 'project'?); allowed: project, group" in msg
    assert "wandb: expected {project, group}" in _error(_edit(write_spec(tmp_path), wandb="p"))
    for empty in ("", "  "):  # "" was taken and then ignored (the experiment's project used), "  " refused
        assert f"wandb.project: expected a name (a non-empty string), got {empty!r}" in _error(
            _edit(write_spec(tmp_path), wandb={"project": empty}))


def test_an_experiment_config_given_as_a_spec_is_named_so(repo_root):
    """It said "unknown key 'data'; allowed: axes, ...", as if the experiment were a misspelt spec."""
    with pytest.raises(ConfigError, match=r"sft\.yaml: an experiment config \(keys data, .*\), not a sweep spec"):
        load_spec(Path(repo_root) / "experiments/quickstart/sft.yaml")


def test_an_analysis_spec_given_as_a_sweep_spec_says_which_command_takes_it(repo_root):
    """It said "unknown key 'benchmarks'; allowed: axes, ...": a reproduce spec given to ``klear-lab sweep``."""
    path = Path(repo_root) / "analysis/fig2_clip.yaml"
    with pytest.raises(ConfigError, match=r"fig2_clip\.yaml: an analysis spec \(keys benchmarks, .*\), not a sweep "
                                          r"spec: `klear-lab reproduce .*fig2_clip\.yaml` shows it"):
        load_spec(path)


def test_axis_key_not_in_config(tmp_path):
    msg = _error(_edit(write_spec(tmp_path), axes={"optim.lrr": [0.1]}))
    assert "axes.optim.lrr" in msg and "did you mean" in msg
    assert "value 0.1" not in msg  # the key is at fault, not the value (a new-user walkthrough)


def test_an_unknown_axis_key_is_named_though_another_axis_is_probed_first(tmp_path):
    msg = _error(_edit(write_spec(tmp_path), axes={"optim.lr": [0.1], "rl.lr": [1]}))
    assert msg.startswith(f"{tmp_path / 'toy.yaml'}: axes.rl.lr: ") and "unknown key 'rl.lr'" in msg


def test_an_axis_on_a_parameter_its_component_lacks_is_named_though_another_axis_is_probed_first(tmp_path):
    """It was blamed on the axis being probed: ``axes.optim.lr: value 0.1 (other axes at ...): ...``."""
    msg = _error(_edit(write_spec(tmp_path), axes={"optim.lr": [0.1], "data.filter.max_chrs": [100]}))
    assert msg.startswith(f"{tmp_path / 'toy.yaml'}: axes.data.filter.max_chrs: "), msg
    assert "'data.filter.max_chrs' is not a parameter of difficulty_filter 'none'" in msg and "value 0.1" not in msg


def test_an_error_in_what_the_sweep_sets_on_every_trial_is_not_an_axis_values(tmp_path):
    msg = _error(_edit(write_spec(tmp_path), wandb={"project": "a/b"}))
    assert msg.startswith(f"{tmp_path / 'toy.yaml'}: what the sweep sets on every trial (from wandb:")
    assert "tracking.wandb.project 'a/b' may not contain '/'" in msg and "axes" not in msg.split(":")[1]


def test_a_bad_name_from_the_command_line_is_named_as_such(tmp_path):
    with pytest.raises(ConfigError, match=r"^--name 'a b' must use letters"):
        load_spec(write_spec(tmp_path), name="a b")
    with pytest.raises(ConfigError, match=r"toy.yaml: name: 'a b' must use"):
        load_spec(_edit(write_spec(tmp_path), name="a b"))


def test_axis_value_rejected_by_component(tmp_path):
    msg = _error(_edit(write_spec(tmp_path), axes={"data.mix.name": ["top_k", "no_such_mix"]}))
    assert "axes.data.mix.name" in msg and "no_such_mix" in msg


def test_component_param_axis_composes(tmp_path):
    path = _edit(write_spec(tmp_path), axes={"data.mix": [{"name": "top_k", "k": 1}, {"name": "all"}]})
    assert [a.label for a in check_spec(load_spec(path))] == ["mix=top_k", "mix=all"]


def test_empty_grid(tmp_path):
    assert "empty grid" in _error(_edit(write_spec(tmp_path), axes={"optim.lr": []}))
    assert "empty grid" in _error(_edit(write_spec(tmp_path), axes={}))


def test_bad_storage_urls(tmp_path):
    assert "storage" in _error(_edit(write_spec(tmp_path), storage="not a url"))
    assert "driver not available" in _error(_edit(write_spec(tmp_path), storage="nosuchdb://x/y"))
    assert "sqlite:///PATH" in _error(_edit(write_spec(tmp_path), storage="sqlite://"))


def test_objective_must_be_a_logged_metric(tmp_path):
    msg = _error(_edit(write_spec(tmp_path), objective={"metric": "accuracy"}))
    assert "objective.metric" in msg and "val/" in msg
    assert "metrics[0]" in _error(_edit(write_spec(tmp_path), metrics=["loss"]))


def test_baseline_must_be_an_arm(tmp_path):
    assert "baseline" in _error(_edit(write_spec(tmp_path), baseline={"optim.lr": 0.5}))
    assert "baseline.optim.wd" in _error(_edit(write_spec(tmp_path), baseline={"optim.wd": 0.5}))
    assert "no arm is labelled" in _error(_edit(write_spec(tmp_path), baseline="lr=9"))
    check_spec(load_spec(_edit(write_spec(tmp_path), baseline="lr=0.002")))


def test_sampler_rules(tmp_path):
    assert "n_trials" in _error(_edit(write_spec(tmp_path), sampler="tpe"))
    assert "needs sampler tpe or random" in _error(
        _edit(write_spec(tmp_path), axes={"optim.lr": {"low": 1e-4, "high": 1e-2, "log": True}}))
    spec = load_spec(_edit(write_spec(tmp_path), sampler="tpe", n_trials=4,
                           axes={"optim.lr": {"low": 1e-4, "high": 1e-2, "log": True}}))
    assert check_spec(spec) == []


def test_a_baseline_no_sampled_arm_can_match_is_refused_up_front(tmp_path):
    """A continuous range draws a new value per trial: the baseline matched no arm and failed the compare
    only after the whole sweep had run."""
    lr_range = {"low": 1e-4, "high": 1e-2, "log": True}
    msg = _error(_edit(write_spec(tmp_path), sampler="tpe", n_trials=4, baseline="lr=0.001",
                       axes={"optim.lr": lr_range, "rl.clip.name": ["ppo", "gppo"]}))
    assert "baseline: no arm can be named in advance" in msg and "optim.lr" in msg
    for axes in ({"optim.lr": [0.001, 0.002]}, {"optim.lr": {**lr_range, "log": False, "step": 1e-4}},
                 {"trainer.max_steps": {"low": 1, "high": 4}}):
        baseline = {key: 0.001 if key == "optim.lr" else 1 for key in axes}
        load_spec(_edit(write_spec(tmp_path), sampler="random", n_trials=4, baseline=baseline, axes=axes))


def test_a_baseline_the_sampler_never_draws_is_refused_up_front(tmp_path):
    """tpe/random: a baseline value not among an axis's values, out of its range or off its step grid
    passed --validate-only; the comparison refused it only after every trial had trained."""
    clips = {"data.filter.name": ["none", "correct_only"]}  # the toy is an SFT run
    sampled = {"sampler": "random", "n_trials": 5}
    msg = _error(_edit(write_spec(tmp_path), **sampled, axes=clips, baseline={"data.filter.name": "band"}))
    assert ("baseline.data.filter.name: band is not one of the axis's values (none, correct_only): sampler "
            "random never draws it") in msg  # as the spec writes them (YAML), not Python's repr
    assert ("baseline: no arm sampler random can draw is labelled 'filter=nope'; arms: filter=none, "
            "filter=correct_only") in _error(_edit(write_spec(tmp_path), **sampled, axes=clips, baseline="filter=nope"))
    steps = {"sft.max_steps": {"low": 1, "high": 5, "step": 2}}
    for value, said in [(7, "7 is outside the axis's range [1, 5]"),
                        (4, "4 is not on the axis's grid (low 1 plus a multiple of step 2)"),
                        (3.0, "3.0 is not an integer, but the axis draws integers")]:
        assert f"baseline.sft.max_steps: {said}" in _error(
            _edit(write_spec(tmp_path), **sampled, axes=steps, baseline={"sft.max_steps": value}))
    assert "no arm sampler random can draw is labelled 'max_steps=4'" in _error(
        _edit(write_spec(tmp_path), **sampled, axes=steps, baseline="max_steps=4"))
    # drawable ones stay accepted
    for axes, baseline in [(clips, {"data.filter.name": "none"}), (clips, "filter=none"), (steps, {"sft.max_steps": 3}),
                           (steps, "max_steps=5"), ({"optim.lr": {"low": 1e-4, "high": 1e-2, "step": 1e-4}},
                                                    {"optim.lr": 0.001}),
                           ({"optim.lr": {"low": 1e-4, "high": 1e-2, "step": 1e-4}}, "lr=0.001")]:
        check_spec(load_spec(_edit(write_spec(tmp_path), **sampled, axes=axes, baseline=baseline)))


def test_a_range_its_step_does_not_divide_is_refused(tmp_path):
    """Optuna cut such a range down with a raw UserWarning ("It will be replaced with [1, 5.0]") and ran it."""
    for body, said in [({"low": 1, "high": 5.5, "step": 1}, "step 1 does not divide the range [1, 5.5]: the "
                        "sampler would never draw above 5; give high: 5 (or 6)"),
                       ({"low": 1, "high": 4, "step": 2}, "step 2 does not divide the range [1, 4]: the sampler "
                        "would never draw above 3; give high: 3 (or 5)"),
                       ({"low": 0.1, "high": 1.0, "step": 0.2}, "step 0.2 does not divide the range [0.1, 1.0]: "
                        "the sampler would never draw above 0.9; give high: 0.9 (or 1.1)")]:
        path = _edit(write_spec(tmp_path), sampler="tpe", n_trials=4, axes={"sft.max_steps": body})
        with pytest.raises(ConfigError, match=re.escape(f"{path}: axes.sft.max_steps: {said}")):
            load_spec(path)
    for body in ({"low": 1, "high": 5, "step": 2}, {"low": 0.1, "high": 0.3, "step": 0.1},
                 {"low": 1.0e-4, "high": 1.0e-2, "step": 1.0e-4}):
        load_spec(_edit(write_spec(tmp_path), sampler="tpe", n_trials=4, axes={"sft.max_steps": body}))


def test_sweep_owned_keys_and_seeds(tmp_path):
    assert "seeds" in _error(_edit(write_spec(tmp_path), axes={"run.seed": [1, 2]}))
    # in overrides they were dropped without a word: the trials ran with the sweep's seeds, names and output
    spec = write_spec(tmp_path)
    body = yaml.safe_load(spec.read_text())
    assert f"{spec}: overrides: 'run.seed=7': run.seed is set by the sweep for each trial (replicates go in " \
        "seeds:" in _error(_edit(spec, overrides=[*body.get("overrides", []), "run.seed=7"]))
    with pytest.raises(ConfigError, match=r"^command line: 'run.out_dir=/tmp/elsewhere': run.out_dir is set by"):
        check_spec(load_spec(write_spec(tmp_path), ["run.out_dir=/tmp/elsewhere"]))
    assert "distinct" in _error(_edit(write_spec(tmp_path), seeds=[1, 1]))
    assert "seeds: expected a non-empty list of integers in [0, 2**32)" in \
        _error(_edit(write_spec(tmp_path), seeds=[-1]))


def test_cli_overrides_apply_to_base_experiment(tmp_path):
    path = write_spec(tmp_path)
    assert "optim.lrr" in _error(path, ["optim.lrr=3"])
    assert load_spec(path, ["sft.max_steps=2"]).overrides == ["sft.max_steps=2"]


def test_labels_and_multi_axis_arms(tmp_path):
    path = _edit(write_spec(tmp_path), axes={"data.mix.name": ["top_k"],
                                             "data.mix.k": {"values": [1, 0], "labels": ["top1", "all"]}})
    spec = load_spec(path)
    assert [a.label for a in check_spec(spec)] == ["mix=top_k,k=top1", "mix=top_k,k=all"]
    assert [a.params for a in grid_arms(spec)][1] == {"data.mix.name": "top_k", "data.mix.k": 0}


def test_shipped_specs_parse(repo_root):
    from pathlib import Path

    for path in sorted(Path(repo_root, "sweeps").rglob("*.yaml")):
        spec = load_spec(path)
        assert spec.axes and spec.seeds, path


def test_every_shipped_spec_passes_its_pre_flight(repo_root):
    """What `klear-lab sweep SPEC --validate-only` runs, on every shipped spec: parsing alone let Tables 2-3's
    paper sweeps ship with overrides every trial would have been refused for."""
    from pathlib import Path

    from klear_lab.sweep.checks import check_spec

    for path in sorted(Path(repo_root, "sweeps").rglob("*.yaml")):
        assert check_spec(load_spec(path)) or load_spec(path).sampler != "grid", path


def test_trial_start(tmp_path):
    from klear_lab.sweep.launcher import needs_fresh

    assert load_spec(write_spec(tmp_path)).trial_start == "preloaded"
    assert load_spec(_edit(write_spec(tmp_path), trial_start="fresh")).trial_start == "fresh"
    assert "trial_start: expected one of preloaded, fresh" in _error(_edit(write_spec(tmp_path), trial_start="fork"))
    # Lightning relaunches multi-device trials from their command line: those start fresh
    assert not needs_fresh({"trainer": {"devices": 1, "strategy": "auto"}})
    assert needs_fresh({"trainer": {"devices": 2, "strategy": "auto"}})
    assert needs_fresh({"trainer": {"devices": "auto", "strategy": "auto"}})
    assert needs_fresh({"trainer": {"devices": 1, "strategy": "ddp"}})


@pytest.mark.parametrize("bad", ["optim.lrr=3", "optim.lr", "data.mix={name:top_k}"])
def test_override_errors_name_the_spec_or_the_command_line(tmp_path, bad):
    from_spec = _error(_edit(write_spec(tmp_path), overrides=["sft.max_steps=2", bad]))
    assert from_spec.startswith(f"{tmp_path}/toy.yaml: overrides: ") and "command line" not in from_spec
    from_cli = _error(_edit(write_spec(tmp_path), overrides=["sft.max_steps=2"]), [bad])
    assert "command line" in from_cli and "overrides" not in from_cli.replace("override ", "")


def test_paper_clip_sweep_arms_differ_only_in_the_clip_rule(repo_root):
    """Figure 2 compares clipping rules: the token-level arms must share everything else of the recipe,
    dual clip c = 10 included (an arm that names another component starts from that one's defaults)."""
    from pathlib import Path

    from klear_lab.sweep.grid import trial_layer

    spec = load_spec(Path(repo_root, "sweeps/paper/fig2_clip.yaml"))
    clips = {arm.label: spec.compose([trial_layer(spec, arm.params, 0, None, None, arm.label)])["rl"]["clip"]
             for arm in grid_arms(spec)}
    gppo, higher = clips["clip=gppo"], clips["clip=clip_higher"]
    gppo_only = {"name", "beta1", "beta2", "only_high"}
    assert {k: v for k, v in gppo.items() if k not in gppo_only} == {k: v for k, v in higher.items() if k != "name"}
    assert higher["dual_clip_c"] == 10.0


def test_a_relative_sqlite_storage_is_saved_absolute(tmp_path, monkeypatch):
    """``sweep.json`` kept ``sqlite:///study.db``: compare run from elsewhere made a new, empty database."""
    from klear_lab.sweep.storage import default_storage_url

    monkeypatch.chdir(tmp_path)
    spec = load_spec(_edit(write_spec(tmp_path), storage="sqlite:///dbs/study.db"))
    assert default_storage_url(spec) == f"sqlite:///{tmp_path / 'dbs' / 'study.db'}"
    spec = load_spec(_edit(write_spec(tmp_path), storage="postgresql://u:secret@db/s"))
    assert default_storage_url(spec) == "postgresql://u:secret@db/s"


def test_an_unreachable_postgres_storage_is_a_config_error_without_the_password(tmp_path):
    """The first connection (the study lock's) raised a raw sqlalchemy traceback."""
    from klear_lab.errors import ConfigError
    from klear_lab.sweep.storage import default_storage_url, open_study

    spec = load_spec(_edit(write_spec(tmp_path), storage="postgresql+psycopg://u:secret@127.0.0.1:9/klear"))
    shown = r"postgresql\+psycopg://u:\*\*\*@127.0.0.1:9/klear"
    with pytest.raises(ConfigError, match=rf"storage {shown}: cannot connect") as err:
        open_study(spec, default_storage_url(spec), create=True)
    assert "secret" not in str(err.value)


def test_the_frozen_spec_keeps_numbers_numbers_and_bad_ranges_stop_before_a_study(tmp_path):
    """``spec.yaml`` was read with YAML 1.1 and written back quoted: a range from 1e-5 came back as a string,
    and compare/dashboard could not load the sweep. A log range from 0 raised in Optuna's first trial."""
    from klear_lab.errors import ConfigError
    from klear_lab.sweep.launch import freeze_spec
    from klear_lab.sweep.storage import default_storage_url

    spec = load_spec(_edit(write_spec(tmp_path), sampler="tpe", n_trials=2,
                           axes={"optim.lr": {"low": 1e-5, "high": 1e-3, "log": True}}))
    (tmp_path / "raw.yaml").write_text((tmp_path / "toy.yaml").read_text().replace("1.0e-05", "1e-5"))
    spec = load_spec(tmp_path / "raw.yaml", name="toy")
    frozen = load_spec(freeze_spec(spec, default_storage_url(spec)))
    assert (frozen.axes[0].low, frozen.axes[0].high) == (1e-5, 1e-3)
    bad = load_spec(_edit(write_spec(tmp_path), sampler="tpe", n_trials=2,
                          axes={"optim.lr": {"low": 0.0, "high": 0.1, "log": True}}))
    with pytest.raises(ConfigError, match=r"axes.optim.lr: .*low > 0"):
        check_spec(bad)


def test_an_objective_no_run_logs_stops_before_a_study(tmp_path):
    """Any ``val/...`` passed: ``val/acx`` trained every trial, then failed each for lack of its objective."""
    from klear_lab.sweep.spec import DEFAULT_RUNNER

    real = {"runner": DEFAULT_RUNNER}
    msg = _error(_edit(write_spec(tmp_path), objective={"metric": "val/acx"}, **real))
    assert "objective.metric: 'val/acx' is not a metric sft runs log (did you mean 'val/acc'?)" in msg
    assert "val/<source>/acc" in msg  # what sft runs log under val/
    assert "metrics[1]: 'val/loss'" in _error(_edit(write_spec(tmp_path), metrics=["train/loss", "val/loss"], **real))
    assert "(only rl runs do)" in _error(_edit(write_spec(tmp_path), metrics=["val/gain"], **real))
    ok = _edit(write_spec(tmp_path), metrics=["train/loss", "val/level2/acc", "val/arith/acc", "data/mix_share/a"],
               **real)
    assert len(check_spec(load_spec(ok))) == 3
    path = _edit(write_spec(tmp_path), metrics=["rl/reward_mean"], **real)
    (tmp_path / "exp.yaml").write_text("run: {name: toy, kind: rl}\n")
    msg = _error(path)
    assert "metrics[0]: 'rl/reward_mean' is not a metric rl runs log (did you mean 'reward/mean'?)" in msg
    check_spec(load_spec(_edit(path, metrics=["val/gain", "reward/mean", "rl/clipfrac", "train/pg_loss"])))
    (tmp_path / "my_clip.py").write_text(STAT_CLIP)  # a plugin clip variant logs its own statistics under rl/
    (tmp_path / "exp.yaml").write_text(f"run: {{name: toy, kind: rl}}\nplugins: [{tmp_path / 'my_clip.py'}]\n")
    check_spec(load_spec(_edit(path, metrics=["rl/my_ratio_stat", "rl/clipfrac"])))
    assert "'val/acx' is not a metric rl runs log" in _error(_edit(path, metrics=["val/acx"]))
    # with plugins loaded a typo under rl/ went unchecked; the plugin is asked what it logs instead
    assert "'rl/reward_mean' is not a metric rl runs log" in _error(_edit(path, metrics=["rl/reward_mean"]))
    # a statistic the plugin logs only at the parameters the trials set (here an axis value): asked at those
    extra = _edit(path, metrics=["rl/extra_stat"], axes={"rl.clip": [{"name": "stat_clip", "extra": True}]})
    assert len(check_spec(load_spec(extra))) == 1
    assert "'rl/extra_stat' is not a metric" in _error(_edit(path, axes={"rl.clip.scale": [1.0, 2.0]}))


STAT_CLIP = """
from dataclasses import dataclass
import torch
from klear_lab.registry import CLIP
from klear_lab.rl.clip.base import ClipOutput

@CLIP.register("stat_clip")
@dataclass(frozen=True)
class StatClip:
    \"\"\"Test plugin: REINFORCE with a statistic of its own.\"\"\"
    scale: float = 1.0
    extra: bool = False
    def __call__(self, logp, old_logp, adv, mask):
        ratio = torch.exp(logp - old_logp)
        metrics = {"my_ratio_stat": ratio.mean().detach()}
        if self.extra:
            metrics["extra_stat"] = ratio.max().detach()
        return ClipOutput(loss=-adv[:, None] * ratio * mask * self.scale, metrics=metrics)
"""


@pytest.mark.parametrize(("axes", "overrides", "expected"), [
    ({"optim.lr": [0.1, 0.2]}, ["trainer.devices=2", "trainer.strategy=fsdp"],
     "base experiment: every trial would stop before training: trainer.strategy='fsdp': RL on several devices"),
    ({"trainer.strategy": ["ddp", "fsdp"]}, ["trainer.devices=2"], "axes.trainer.strategy: value 'fsdp': "),
    ({"rl.rollout.name": ["hf", "vllm"]}, ["trainer.devices=2"],
     "axes.rl.rollout.name: value 'vllm': rl.rollout=vllm with trainer.devices=2: every rank would start"),
])
def test_arms_train_would_refuse_stop_the_validation(tmp_path, capsys, axes, overrides, expected):
    """``--validate-only`` said OK to RL arms ``klear-lab train`` refuses before loading a model (FSDP, a vLLM
    engine per rank); the sweep then failed every trial."""
    from klear_lab.cli_sweep import main

    path = _edit(write_spec(tmp_path), axes=axes, overrides=overrides)
    (tmp_path / "exp.yaml").write_text("run: {name: toy, kind: rl}\n")
    assert expected in _error(path)
    assert main(["sweep", str(path), "--validate-only"]) == 2
    assert expected in capsys.readouterr().err
    capsys.readouterr()
    code = main(["sweep", str(path), "--validate-only", "trainer.devices=1"])  # one device: any RL strategy
    if "fsdp" in f"{axes}{overrides}" and not torch.cuda.is_available():  # ... but Lightning's FSDP needs a GPU,
        assert code == 2 and "requires a GPU accelerator" in capsys.readouterr().err  # which every trial met
    else:
        assert code == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU, trainer.devices=-1 means every GPU")
def test_trainer_settings_lightning_refuses_here_stop_the_validation(tmp_path, capsys):
    """``trainer.devices=-1`` on a CPU: each trial stopped at its start with Lightning's ConfigError; now the
    sweep stops first, naming the axis value (or the base experiment, with an override that sets it)."""
    from klear_lab.cli_sweep import main

    path = _edit(write_spec(tmp_path), axes={"trainer.devices": [1, -1]})
    assert "axes.trainer.devices: value -1: trainer.accelerator='auto' trainer.devices=-1" in _error(path)
    assert main(["sweep", str(path), "--validate-only"]) == 2
    assert "should be an int > 0" in capsys.readouterr().err
    (tmp_path / "plain").mkdir()
    plain = _edit(write_spec(tmp_path / "plain"), axes={"optim.lr": [0.1, 0.2]})
    assert main(["sweep", str(plain), "--validate-only"]) == 0
    assert main(["sweep", str(plain), "--validate-only", "trainer.precision=64-true"]) == 0  # Lightning takes it
    assert main(["sweep", str(plain), "--validate-only", "trainer.devices=-1"]) == 2
    assert "base experiment: every trial would stop before training: " in capsys.readouterr().err


def test_a_specs_own_plugins_are_read_from_its_directory(tmp_path, monkeypatch):
    """``experiment:`` was read from the spec's directory but a plugin its ``overrides:`` name from the working
    directory: the same spec ran from one directory and failed from another."""
    (tmp_path / "my_clip.py").write_text(STAT_CLIP.replace("stat_clip", "stat_clip_here"))  # one file per name
    path = _edit(write_spec(tmp_path), overrides=["plugins=[my_clip.py]"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    spec = load_spec(path)
    check_spec(spec)
    assert spec.compose()["plugins"] == [str(tmp_path / "my_clip.py")]
    from klear_lab.sweep.launch import freeze_spec  # the sweep directory's frozen copy composes the same way

    frozen = load_spec(freeze_spec(spec, "sqlite:///" + str(tmp_path / "s.db")))
    assert frozen.compose()["plugins"] == [str(tmp_path / "my_clip.py")]
    with pytest.raises(ConfigError, match=f"command line: plugin '{elsewhere / 'my_clip.py'}'"):
        load_spec(path, ["plugins=[my_clip.py]"]).compose()  # typed: the shell's directory, as train's


@pytest.mark.parametrize(("change", "expected"), [
    ({"axes": {"optim.lr": {"low": 1e-4, "high": 1e-2, "step": "0.01"}}, "sampler": "random", "n_trials": 2},
     r"axes.optim.lr.step: expected a number > 0, got '0.01'"),  # was a bare TypeError
    ({"axes": {"optim.lr": {"low": 1e-4, "high": 1e-2, "log": "no"}}, "sampler": "random", "n_trials": 2},
     r"axes.optim.lr.log: expected true or false, got 'no'"),  # was read as log: true
    ({"sampler_seed": -1}, r"sampler_seed: expected an integer >= 0, got -1"),  # numpy's error, for grids too
    ({"wandb": {"project": 5}}, r"wandb.project: expected a name \(a non-empty string\), got 5"),  # blamed on an axis
    ({"axes": {"optim.lr": {"values": 0.1}}}, r"axes.optim.lr.values: expected a list of values, got 0.1"),
    ({"axes": {"optim.lr": [0.001, 1]}}, None),
    ({"axes": {"sft.max_steps": [1, 1.0]}}, r"axes.sft.max_steps: values 1 and 1.0 are the same config value"),
])
def test_bad_spec_values_name_their_key(tmp_path, change, expected):
    path = _edit(write_spec(tmp_path), **change)
    if expected is None:
        check_spec(load_spec(path))
        return
    assert re.search(expected, _error(path)), _error(path)


@pytest.mark.parametrize(("runner", "expected"), [
    ("missing.py:run", r"runner: cannot read .*missing.py"),
    ("sweep_fixtures.py:no_such_runner", r"runner: .*sweep_fixtures.py defines no 'no_such_runner'"),
    ("no_such_module_xyz:run", r"runner: no module 'no_such_module_xyz'"),
    ("klear_lab.run:run_experimentt", r"runner: module 'klear_lab.run' has no 'run_experimentt'"),
])
def test_a_runner_that_does_not_exist_stops_before_a_study(tmp_path, runner, expected):
    """Every trial started, failed on the runner and was counted as a failure a rerun would retry."""
    import shutil

    from sweep_fixtures import HERE

    shutil.copy(HERE, tmp_path / "sweep_fixtures.py")
    path = _edit(write_spec(tmp_path), runner=runner)
    assert re.search(expected, _error(path)), _error(path)
    check_spec(load_spec(_edit(path, runner="sweep_fixtures.py:run")))  # relative to the spec file
    check_spec(load_spec(_edit(path, runner="klear_lab.run:run_experiment")))


def test_runners_bound_in_blocks_or_star_imports_pass_and_a_failing_import_is_named(tmp_path, monkeypatch):
    (tmp_path / "tryrun.py").write_text("try:\n    from sweep_fixtures import run\n"
                                        "except ImportError:\n    run = None\n")
    (tmp_path / "star.py").write_text("from sweep_fixtures import *\n")
    (tmp_path / "broken_runner_mod.py").write_text("import no_such_dependency_xyz\ndef run(cfg):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = write_spec(tmp_path)
    for runner in ("tryrun.py:run", "star.py:run"):
        check_spec(load_spec(_edit(path, runner=runner)))
    message = _error(_edit(path, runner="broken_runner_mod:run"))
    assert "runner: importing 'broken_runner_mod' failed: ModuleNotFoundError" in message, message


@pytest.mark.parametrize(("in_spec", "given"), [("..", None), ("toy", "."), ("toy", "..."), ("toy", "")])
def test_a_name_of_dots_alone_or_empty_is_refused(tmp_path, in_spec, given):
    """``--name ..`` wrote the study, runs and trial logs into the parent of the output directory; ``--name ""``
    fell back to the spec's name without a word."""
    spec = _edit(write_spec(tmp_path), name=in_spec)
    where = "--name" if given is not None else "name:"
    with pytest.raises(ConfigError, match=rf"{where} .* must use letters, digits, '_', '-', '.' only, not dots alone"):
        load_spec(spec, name=given)


def test_an_out_dir_that_is_a_file_is_refused_by_validation(tmp_path, capsys):
    """``--validate-only --out-dir FILE`` said OK; the sweep then stopped creating its study there."""
    from klear_lab.cli_sweep import main

    path, blocker = write_spec(tmp_path), tmp_path / "a-file"
    blocker.write_text("")
    for out_dir in (blocker, blocker / "below"):
        assert main(["sweep", str(path), "--validate-only", "--out-dir", str(out_dir)]) == 2
        assert (f"--out-dir {out_dir}: {blocker} is a file, not a directory: the sweep writes its directory "
                f"{out_dir / 'toy'} (study, trials, runs) there") in capsys.readouterr().err
    assert main(["sweep", str(_edit(path, out_dir=str(blocker))), "--validate-only"]) == 2
    assert f"error: {path}: out_dir: {blocker}: {blocker} is a file" in capsys.readouterr().err  # the spec's key
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "toy").write_text("")  # the sweep's own directory taken by a file
    assert main(["sweep", str(_edit(path, out_dir=str(tmp_path / "out"))), "--validate-only"]) == 2
    assert f"{tmp_path / 'out' / 'toy'} is a file, not a directory" in capsys.readouterr().err


@pytest.mark.parametrize("length, what", [(300, "is 300 bytes, but a directory name may have at most 255"),
                                          (240, "the run directory of a trial's evaluation (`klear-lab compare "
                                                "--rescore`; a cut name would lose the arm's label) would be "
                                                "named like 'xxx")])
def test_a_name_too_long_for_a_directory_is_refused_by_validation(tmp_path, capsys, length, what):
    """A 300-character ``--name`` (the sweep's directory), or one that leaves no room for a trial run's time,
    hash and seed, said OK; the sweep or each of its trials failed later, creating its directory."""
    from klear_lab.cli_sweep import main

    name = "x" * length
    assert main(["sweep", str(write_spec(tmp_path)), "--validate-only", "--name", name]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"klear-lab: error: --name '{'x' * 40}...{'x' * 17}': {what}") and "at most 255" in err
    assert main(["sweep", str(write_spec(tmp_path)), "--validate-only", "--name", "x" * 200]) == 0
    assert not (tmp_path / "out").exists()  # validation makes no directory


def test_the_longest_name_validation_accepts_gives_trials_and_evaluations_their_whole_names(tmp_path, capsys):
    """Validation measured a trial's run directory 3 bytes shorter than the trial's own check (no room for a
    second run started in the same second), and then without the ``-eval`` that ``compare --rescore`` adds to
    the name of each trial's evaluation run: names at the boundary validated, then every trial was refused,
    or every evaluation (now: its name cut, the arm's label first). The evaluation's name is taken from
    ``klear-lab eval``'s own code here."""
    from klear_lab.cli_sweep import main
    from klear_lab.config.yaml_io import dump_yaml
    from klear_lab.stages.eval import _eval_run
    from klear_lab.sweep.grid import trial_layer

    path = write_spec(tmp_path)
    accepted = [n for n in range(200, 240) if main(["sweep", str(path), "--validate-only", "--name", "x" * n]) == 0]
    capsys.readouterr()
    assert accepted and accepted == list(range(200, accepted[-1] + 1))

    def run_names(spec, arm, seed):
        """The trial's run.name (the trial composes: no ConfigError), its evaluation's as `klear-lab eval` gives it."""
        cfg = spec.compose([trial_layer(spec, arm.params, seed, None, None, arm.label)])
        (tmp_path / "config.yaml").write_text(dump_yaml(cfg))
        return cfg["run"]["name"], _eval_run(tmp_path / "config.yaml", "unused")[1]["name"]

    spec = load_spec(path, name="x" * accepted[-1])
    for arm in grid_arms(spec):
        for seed in spec.seeds:
            trial, evaluation = run_names(spec, arm, seed)
            assert evaluation == f"{trial}-eval"  # whole: the arm's label kept
    long = load_spec(path, name="x" * (accepted[-1] + 1))
    trial, evaluation = run_names(long, grid_arms(long)[0], max(long.seeds))
    assert evaluation != f"{trial}-eval"  # one byte more and it is cut: validation refuses no name that fits


def test_a_sweep_started_before_evaluation_names_were_counted_still_continues(tmp_path, capsys):
    """Counting the ``-eval`` of the evaluations' names made validation stricter: a sweep already started
    with a name between the two limits could no longer be rerun or joined. Its trials are measured as before."""
    from klear_lab.cli_sweep import main

    path = write_spec(tmp_path)
    accepted = [n for n in range(200, 240) if main(["sweep", str(path), "--validate-only", "--name", "x" * n]) == 0]
    name = "x" * (accepted[-1] + 3)  # its trials' directories fit; its evaluations' whole names do not
    assert main(["sweep", str(path), "--validate-only", "--name", name]) == 2
    assert "the run directory of a trial's evaluation" in capsys.readouterr().err
    (tmp_path / "out" / name).mkdir(parents=True)
    (tmp_path / "out" / name / "sweep.json").write_text("{}")  # as a started sweep leaves it
    assert main(["sweep", str(path), "--validate-only", "--name", name]) == 0, capsys.readouterr().err
    longer = "x" * (accepted[-1] + 6)  # its trials' directories do not fit either: refused, started or not
    (tmp_path / "out" / longer).mkdir()
    (tmp_path / "out" / longer / "sweep.json").write_text("{}")
    assert main(["sweep", str(path), "--validate-only", "--name", longer]) == 2
    assert "a trial's run directory would be named like" in capsys.readouterr().err


def test_a_baseline_in_the_form_of_an_override_is_pointed_to_its_label(tmp_path):
    """``baseline: optim.lr=0.002`` (how overrides are written) listed the arms without saying which was meant."""
    msg = _error(_edit(write_spec(tmp_path), baseline="optim.lr=0.002"))
    assert "no arm is labelled 'optim.lr=0.002'; arms: lr=0.001, lr=0.002, lr=0.003 (did you mean 'lr=0.002'? a " \
           "label names an axis by its last part; or give {optim.lr: 0.002})" in msg
