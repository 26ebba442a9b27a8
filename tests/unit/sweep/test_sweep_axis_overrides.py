"""An override of what an axis sets for each trial is refused (found by a fresh-user review): ``klear-lab sweep
SPEC optim.lr=0.5`` beside an axis on ``optim.lr`` exited 0, every trial ran with the axis' values, and the study
saved the override in its base, so a rerun without it was refused. An override the trials keep (another parameter
of the component an axis varies) stays allowed: decided by what a trial's config would lose."""

from __future__ import annotations

import re

import pytest
import yaml
from sweep_fixtures import REPO, write_spec

from klear_lab.cli_sweep import main
from klear_lab.errors import ConfigError
from klear_lab.sweep.checks import check_axis_overrides
from klear_lab.sweep.spec import load_spec

RL = REPO / "experiments/quickstart/rl.yaml"  # its clip: gppo (eps_low, eps_high 0.28...)


def _rl_spec(tmp_path, axes, overrides=(), cli=()):
    path = tmp_path / "clips.yaml"
    path.write_text(yaml.safe_dump({"experiment": str(RL), "axes": axes, "overrides": list(overrides),
                                    "objective": {"metric": "val/acc"}, "out_dir": str(tmp_path / "out")}))
    return load_spec(path, list(cli))


def _check(spec):
    check_axis_overrides(spec, spec.compose())


@pytest.mark.parametrize("override", ["optim.lr=0.5", "optim={lr: 0.5}"])
def test_an_override_of_an_axis_key_on_the_command_line_is_refused_before_anything_is_made(tmp_path, capsys,
                                                                                           override):
    spec = write_spec(tmp_path, lrs=(0.001, 0.003))
    for argv in (["--validate-only", override], [override]):
        assert main(["sweep", str(spec), *argv]) == 2
        err = capsys.readouterr().err
        assert f"command line: {override!r}: the axis optim.lr sets optim.lr for each trial" in err, err
        assert "(arm lr=0.001: optim.lr=0.001, not 0.5)" in err
        assert f"change the values of `axes: optim.lr` in {spec} instead" in err
    assert not (tmp_path / "out").exists()


def test_an_override_of_an_axis_key_in_the_spec_names_the_spec_overrides(tmp_path, capsys):
    spec = write_spec(tmp_path, lrs=(0.001, 0.003), overrides=["optim.lr=0.5"])
    assert main(["sweep", str(spec), "--validate-only"]) == 2
    assert f"{spec}: overrides: 'optim.lr=0.5': the axis optim.lr sets optim.lr" in capsys.readouterr().err


def test_an_override_beside_the_axes_is_kept(tmp_path, capsys):
    spec = write_spec(tmp_path, lrs=(0.001, 0.003), overrides=["optim.weight_decay=0.5"])
    assert main(["sweep", str(spec), "--validate-only", "optim.min_lr=0"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("override", ["rl.clip=cispo", "rl.clip.name=cispo", "rl.clip={name: cispo, eps_high: 0.3}"])
def test_a_component_choice_over_an_axis_on_its_name_is_refused(tmp_path, override):
    spec = _rl_spec(tmp_path, {"rl.clip.name": ["gppo", "cispo"]}, cli=[override])
    with pytest.raises(ConfigError, match=r"the axis rl.clip.name sets rl.clip.name for each trial, so trials would "
                                          r"not run with this override \(arm clip=gppo: rl.clip.name='gppo', not "
                                          r"'cispo'\)"):
        _check(spec)


def test_a_parameter_an_arm_of_another_component_drops_is_refused(tmp_path):
    spec = _rl_spec(tmp_path, {"rl.clip.name": ["gppo", "cispo"]}, overrides=["rl.clip.eps_high=0.3"])
    with pytest.raises(ConfigError, match=rf"{spec.path}: overrides: 'rl.clip.eps_high=0.3': the axis rl.clip.name "
                                          r"switches the component, whose parameters start from its defaults, so "
                                          r"trials would not run with this override \(arm clip=cispo: "
                                          r"rl.clip.eps_high=0.28, not 0.3\)"):
        _check(spec)
    whole = _rl_spec(tmp_path, {"rl.clip": ["gppo", "cispo"]}, cli=["rl.clip.eps_high=0.3"])  # a whole-node axis
    with pytest.raises(ConfigError, match=r"command line: 'rl.clip.eps_high=0.3': the axis rl.clip sets "
                                          r"rl.clip.eps_high"):
        _check(whole)


SAME_CLIP = {"values": [{"name": "gppo", "eps_low": 0.1}, "gppo"], "labels": ["low", "gppo"]}  # a whole-node axis


@pytest.mark.parametrize("axes", [{"rl.clip.eps_low": [0.1, 0.2]}, {"rl.clip": SAME_CLIP}, {"rl.clip.name": ["gppo"]}])
def test_a_parameter_every_trial_keeps_is_allowed(tmp_path, axes):
    spec = _rl_spec(tmp_path, axes, cli=["rl.clip.eps_high=0.3"])
    _check(spec)  # every arm keeps gppo with eps_high 0.3


def test_an_axis_value_set_by_the_section_above_it_is_refused_where_it_is_not_a_list_item(tmp_path):
    spec = _rl_spec(tmp_path, {"rl.clip.eps_high": [0.2, 0.3]}, cli=["rl.clip={name: gppo, eps_high: 0.25}"])
    with pytest.raises(ConfigError, match=r"the axis rl.clip.eps_high sets rl.clip.eps_high for each trial"):
        _check(spec)


def test_a_section_override_setting_the_axis_field_says_to_leave_it_out(tmp_path):
    """The section's other fields are kept; the field the axis sets need not be given at all."""
    spec = _rl_spec(tmp_path, {"rl.clip.eps_high": [0.2, 0.3]}, cli=["rl.clip={name: gppo, eps_high: 0.25}"])
    with pytest.raises(ConfigError, match=r"yet the study would record it in its base; leave rl.clip.eps_high out "
                                          r"of the override$"):
        _check(spec)
    _check(_rl_spec(tmp_path, {"rl.clip.eps_high": [0.2, 0.3]}, cli=["rl.clip={name: gppo}"]))


@pytest.mark.parametrize("override", ["tracking.wandb.project=mine", "tracking.wandb={project: mine}"])
def test_a_w_and_b_project_the_spec_sets_is_not_overridden_without_a_word(tmp_path, override):
    """The spec's ``wandb: project:`` is written into every trial; without it the override stands."""
    from klear_lab.sweep.override_checks import check_owned_overrides

    spec = write_spec(tmp_path, wandb={"project": "theirs"})
    with pytest.raises(ConfigError, match=rf"command line: '{re.escape(override)}': the W&B project is set for "
                                          rf"each trial by .*toy.yaml's `wandb: project: theirs`: change it there"):
        check_owned_overrides(load_spec(spec, [override]))
    check_owned_overrides(load_spec(write_spec(tmp_path), [override]))
    check_owned_overrides(load_spec(spec, ["tracking.wandb.mode=offline"]))


def test_the_axis_named_is_the_one_that_switches_the_component(tmp_path):
    """Not the first axis of the same component (an eps_high axis said it switched the clip)."""
    spec = _rl_spec(tmp_path, {"rl.clip.eps_high": [0.25, 0.3], "rl.clip.name": ["gppo", "clip_higher"]},
                    cli=["rl.clip.eps_low=0.1"])
    with pytest.raises(ConfigError, match=r"the axis rl.clip.name switches the component, .*change the values of "
                                          r"`axes: rl.clip.name`"):
        _check(spec)


def test_a_study_started_with_such_an_override_can_still_be_continued(tmp_path, monkeypatch, capsys):
    """Refused now, it was accepted before: the study recorded it in its base, so it could be continued neither
    with it (refused) nor without it (another base). With it, the sweep warns and goes on."""
    from klear_lab.sweep import checks

    monkeypatch.setenv("KLEAR_FAKE_SLEEP", "0")
    spec = write_spec(tmp_path, lrs=(0.001, 0.003))
    with monkeypatch.context() as old:  # the old check, which let it through
        old.setattr(checks, "check_axis_overrides", lambda spec, base: None)
        assert main(["sweep", str(spec), "optim.lr=0.5"]) == 0
    capsys.readouterr()
    with pytest.warns(UserWarning, match=r"the study was started with it before such overrides were refused"):
        assert main(["sweep", str(spec), "optim.lr=0.5"]) == 0
    assert main(["sweep", str(write_spec(tmp_path, name="fresh", lrs=(0.001, 0.003))), "optim.lr=0.5"]) == 2


def test_a_list_written_whole_whose_only_change_is_the_axis_field_is_refused(tmp_path):
    """Its unchanged ``name`` counted as kept (a review's nitpick): the 99 was dropped by every trial. A list
    that changes more (another source) stays allowed, as a placeholder path beside an axis on it is."""
    axes = {"data.sources.0.n_prompts": [10, 20]}
    same = "data.sources=[{name: arith_r1, n_prompts: 99, levels: [1, 2, 3], level_weights: [1.0, 1.0, 1.0]}]"
    spec = write_spec(tmp_path, axes=axes, overrides=[same])
    with pytest.raises(ConfigError, match=r"the axis data.sources.0.n_prompts sets data.sources.0.n_prompts for "
                                          r"each trial.*leave data.sources.0.n_prompts out of the override$"):
        _check(load_spec(spec))
    other = "data.sources=[{name: arith, n_prompts: 99}]"  # another source: the trials keep it
    _check(load_spec(write_spec(tmp_path, axes=axes, overrides=[other])))


def test_a_placeholder_list_given_in_the_spec_and_again_on_the_command_line_is_allowed(tmp_path):
    """Dropping one copy left the other, so the override looked like it changed nothing and was refused with
    the axis message (a review's nitpick): its copies are now dropped together."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for f in (a, b):
        f.write_text('{"prompt": "p", "answer": "1", "response": "r"}\n')
    placeholder = f"data.sources=[{{name: file, path: {tmp_path / 'placeholder.jsonl'}, format: records}}]"
    spec = write_spec(tmp_path, overrides=[placeholder], axes={"data.sources.0.path": [str(a), str(b)]})
    _check(load_spec(spec))
    _check(load_spec(spec, [placeholder]))
