"""Values a probe of the CLI found accepted or crashing: each is now a ConfigError naming its key."""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

from klear_lab.config.compose import compose
from klear_lab.errors import ConfigError

SFT = Path(__file__).resolve().parents[3] / "experiments/quickstart/sft.yaml"


@pytest.mark.parametrize("key", ["optim.lr", "optim.weight_decay", "eval.temperature", "sft.epochs"])
@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan"])
def test_non_finite_numbers_are_refused_by_key(tmp_path, key, value):
    """``lr: .inf`` trained to all-NaN weights and was recorded as completed."""
    section, name = key.split(".")
    exp = tmp_path / "e.yaml"
    exp.write_text(f"base: {SFT}\n{section}: {{{name}: {value}}}\n")
    with pytest.raises(ConfigError, match=rf"e.yaml: {key}: expected a finite number"):
        compose(exp)


@pytest.mark.parametrize("section, match", [
    ("optim: {betas: [0.9, .nan]}", r"optim.betas.1: expected a finite number, got nan"),
    ("data: {mix: {name: weighted, weights: {arith: .inf}}}", r"data.mix.weights.arith: expected a finite number"),
])
def test_non_finite_numbers_inside_lists_and_mappings_are_named(tmp_path, section, match):
    exp = tmp_path / "e.yaml"
    exp.write_text(f"base: {SFT}\n{section}\n")
    with pytest.raises(ConfigError, match=rf"e.yaml: {match}"):
        compose(exp)


@pytest.mark.parametrize("override, match", [
    ("data.max_length=0", r"data.max_length must be >= 1"),  # was a ZeroDivisionError
    ("data.max_length=-1", r"data.max_length must be >= 1"),
    ("sft.max_steps=-5", r"sft.max_steps must be > 0, or 0 or -1"),
    ("data.decontaminate_ngram=-1", r"data.decontaminate_ngram must be 0 \(off\) or a word count"),  # at compose
])
def test_out_of_range_values_are_refused(override, match):
    with pytest.raises(ConfigError, match=match):
        compose(SFT, [override])


def test_a_base_that_is_not_a_file_name_is_refused(tmp_path):
    exp = tmp_path / "e.yaml"
    exp.write_text("base: 3\n")
    with pytest.raises(ConfigError, match=r"e.yaml: base: expected a file name or a list of them, got 3"):
        compose(exp)


def test_a_run_directory_that_cannot_be_made_names_run_out_dir(tmp_path):
    from klear_lab.tracking import create_run_dir

    blocker = tmp_path / "file"
    blocker.write_text("")
    cfg = compose(SFT, [f"run.out_dir={blocker}/runs"])
    with pytest.raises(ConfigError, match=r"run.out_dir: cannot create the run directory .*file/runs/"):
        create_run_dir(cfg)


def test_a_run_name_too_long_for_its_directory_is_refused_at_compose(tmp_path):
    """A 230-byte run.name failed only when the run directory was made (after the data and model were
    built), blaming run.out_dir."""
    from klear_lab.tracking import create_run_dir

    with pytest.raises(ConfigError, match=r"run.name is 230 bytes: .* give one of at most 226 bytes"):
        compose(SFT, ["run.name=" + "a" * 230])
    with pytest.raises(ConfigError, match=r"run.name is 228 bytes"):  # counted as written on disk: UTF-8
        compose(SFT, ["run.name=" + "ü" * 114])
    cfg = compose(SFT, ["run.name=" + "a" * 226, f"run.out_dir={tmp_path}"])  # the longest that fits
    assert len(create_run_dir(cfg).name.encode()) <= 255 - len("-99")


@pytest.mark.parametrize("override, got", [("run.name=123", "int (123)"), ("run.name=12:30", "int (750)"),
                                            ("run.group=1e3", "float (1000.0)"), ("run.name=yes", "bool (True)")])
def test_text_read_as_a_number_is_refused_with_how_to_quote_it(override, got):
    """YAML reads ``run.name=123`` as a number, and ``12:30`` as 750 (base 60): guessing the text back would
    name runs "750"; the refusal says how to quote it, which keeps the text as written."""
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"{key}: expected str( or null)?, got {re.escape(got)}; YAML reads it as a "
                                          rf".*quote it \({key}=\"'...'\" on a command line"):
        compose(SFT, [override])
    assert compose(SFT, [f"{key}='{override.split('=')[1]}'"])[key.split(".")[0]][key.split(".")[1]] == \
        override.split("=")[1]


@pytest.mark.parametrize("override, match", [
    ("run.name=[1]", r"run.name: expected str, got list \(\[1\]\)$"),  # no hint: a list is no name
    ("run.seed=abc", r"run.seed: expected int, got str"),
])
def test_other_type_errors_get_no_quoting_hint(override, match):
    with pytest.raises(ConfigError, match=match):
        compose(SFT, [override])


def test_an_interpolation_that_cannot_resolve_names_key_value_and_file(tmp_path):
    """OmegaConf's message named neither the file nor the value ("full_key: optim.min_lr object_type=dict")."""
    exp = tmp_path / "exp.yaml"
    exp.write_text(f"base: {SFT}\noptim:\n  min_lr: ${{optim.nope}}\n")
    with pytest.raises(ConfigError, match=re.escape("optim.min_lr: '${optim.nope}': cannot resolve the interpolation: "
                                                    "Interpolation key 'optim.nope' not found (optim.min_lr from "
                                                    f"{exp}")):
        compose(exp)
    with pytest.raises(ConfigError, match=re.escape("(run.name from command line)")):
        compose(SFT, ["run.name=${run.nope}"])


def test_a_base_that_is_a_directory_says_so(tmp_path):
    """It said "not found (looked for d.yaml)", as if the directory were not there."""
    (tmp_path / "d").mkdir()
    exp = tmp_path / "exp.yaml"
    exp.write_text("base: d\n")
    with pytest.raises(ConfigError, match=re.escape(f"base 'd' is a directory ({tmp_path / 'd'}); name an experiment")):
        compose(exp)


def test_the_tiny_tokenizer_learns_from_the_start_of_each_text_only():
    """BPE training grows with the square of a word's length: one 800 KB row held a run for minutes."""
    from klear_lab.models.tokenizer import TRAIN_CHARS, train_tokenizer

    tok = train_tokenizer(["a b c " * 10, "a" * TRAIN_CHARS + " qz" * 2000], 300)
    assert " qz" not in tok.get_vocab() and "Ġqz" not in tok.get_vocab()
    learned = train_tokenizer(["a b c " * 10, " qz" * 2000], 300)
    assert "Ġqz" in learned.get_vocab()


def test_a_key_given_twice_and_an_empty_file_are_refused(tmp_path):
    """YAML kept the last of two ``base:`` lines silently, and an empty file became a default SFT run."""
    twice = tmp_path / "twice.yaml"
    twice.write_text(f"base: {SFT}\noptim: {{lr: 0.1}}\nbase: {SFT}\n")
    with pytest.raises(ConfigError, match=r"twice.yaml:3:1: malformed YAML: key 'base' is given twice"):
        compose(twice)
    nested = tmp_path / "nested.yaml"
    nested.write_text(f"base: {SFT}\noptim: {{lr: 0.1, lr: 0.2}}\n")
    with pytest.raises(ConfigError, match=r"key 'lr' is given twice"):
        compose(nested)
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    with pytest.raises(ConfigError, match=r"empty.yaml: the file is empty"):
        compose(empty)


def test_yaml_merge_keys_still_load(tmp_path):
    exp = tmp_path / "merge.yaml"
    exp.write_text(f"base: {SFT}\n_shared: &opt {{lr: 0.01}}\noptim:\n  <<: *opt\n  warmup_steps: 3\n")
    from klear_lab.config.yaml_io import load_yaml

    assert load_yaml(exp)["optim"] == {"lr": 0.01, "warmup_steps": 3}


def test_a_warmup_as_long_as_the_run_is_warned_with_the_learning_rate_reached():
    """The quickstart's 30 warmup steps in a 6-step run: the rate rose to a fifth of optim.lr, silently."""
    from klear_lab.builders import optim_settings
    from klear_lab.modules.optim import lr_lambda

    cfg = compose(SFT, ["optim.warmup_steps=30", "optim.lr=1e-3"])
    with pytest.warns(UserWarning, match=r"optim.warmup_steps=30 is not below the run's 6 scheduled steps: the "
                                         r"learning rate ends at 0.0002, below optim.lr=0.001"):
        settings = optim_settings(cfg, 6)
    assert lr_lambda(settings)(5) * 1e-3 == pytest.approx(2e-4)  # what the warning says the last step gets
    with pytest.warns(UserWarning, match=r"reaches optim.lr=0.001 only at the last step, and no cosine phase"):
        optim_settings(cfg, 30)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        optim_settings(cfg, 31)
