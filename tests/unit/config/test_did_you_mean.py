"""The one did-you-mean every misspelt-name error uses (``errors.did_you_mean``), and its path prefix."""

from __future__ import annotations

import pytest

from klear_lab.config.compose import compose
from klear_lab.errors import ConfigError, did_you_mean


def test_the_closest_choice_is_suggested_or_nothing():
    assert did_you_mean("seedz", ["axes", "seeds", "sampler"]) == " (did you mean 'seeds'?)"
    assert did_you_mean("zzz", ["axes", "seeds"]) == ""  # nothing near: no guess
    assert did_you_mean("lr", {"lr": 1, "wd": 2}) == " (did you mean 'lr'?)"  # a mapping's keys are the choices


def test_a_prefix_goes_before_the_suggestion_not_into_the_comparison():
    assert did_you_mean("lrr", ["lr", "warmup_steps"], prefix="optim.") == " (did you mean 'optim.lr'?)"
    assert did_you_mean("zzz", ["lr"], prefix="optim.") == ""  # no prefix alone when nothing is close


@pytest.mark.parametrize(("body", "said"), [
    ("optim: {lrr: 1}\n", "unknown key 'optim.lrr' (did you mean 'optim.lr'?); allowed under optim:"),
    ("data: {mix: {name: top_k, kk: 1}}\n",
     "'data.mix.kk' is not a parameter of data_mix 'top_k' (did you mean 'data.mix.k'?); allowed under data.mix:"),
])
def test_a_misspelt_experiment_key_suggests_its_whole_path(tmp_path, body, said):
    """validate.py builds the hint with the section's path in front, through ``did_you_mean(prefix=)``."""
    exp = tmp_path / "e.yaml"
    exp.write_text(body)
    with pytest.raises(ConfigError) as err:
        compose(exp)
    assert said in str(err.value)
