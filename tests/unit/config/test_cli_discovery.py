"""What ``klear-lab components`` and ``klear-lab config --keys`` tell someone looking for a knob."""

from __future__ import annotations

import os
from dataclasses import dataclass

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

from klear_lab.cli import build_parser, main
from klear_lab.config.compose import compose
from klear_lab.config.describe import field_docs, resolve_axes, split_doc
from klear_lab.errors import ConfigError


@pytest.fixture(autouse=True)
def wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # no cell wraps


@pytest.mark.parametrize("word, axis", [
    ("filter", "difficulty_filter"), ("data.filter", "difficulty_filter"), ("mix", "data_mix"),
    ("data.mix", "data_mix"), ("rl.clip", "clip"), ("clip", "clip"), ("rl.reward", "reward"),
    ("code_reward", "reward"), ("group_filter", "group_filter"), ("rl.group_filter", "group_filter"),
    ("sources", "source"), ("model.tiny", "model"),
])
def test_components_takes_the_config_key_of_an_axis(word, axis, capsys):
    """``klear-lab components filter`` and ``components mix`` failed: "unknown axis 'filter'"."""
    assert main(["components", word]) == 0
    title = capsys.readouterr().out.splitlines()[0].strip()
    assert title.startswith(f"{axis} — ")


def test_components_names_the_axes_and_their_keys_for_anything_else(capsys):
    assert resolve_axes("rl") == ["clip", "aggregation", "advantage", "group_filter", "reward", "rollout"]
    assert main(["components", "fliter"]) == 2
    err = capsys.readouterr().err
    assert "unknown axis 'fliter' (did you mean 'filter'?)" in err
    assert "difficulty_filter (data.filter)" in err and "reward (rl.reward, eval.reward, eval.code_reward)" in err
    assert main(["components", "rl", "group_filter"]) == 2
    assert "did you mean `klear-lab components rl.group_filter`?" in capsys.readouterr().err


def _cells(listing: str, column: int) -> str:
    return "\n".join(line.split("│")[column].rstrip() for line in listing.splitlines() if line.startswith("│"))


def test_components_show_allowed_values_and_documented_parameters(capsys):
    """Parameters were ``metric: str = 'acc'`` alone, and only the docstring's first line was shown."""
    assert main(["components", "group_filter"]) == 0
    params = _cells(capsys.readouterr().out, 2)
    assert "metric: 'acc' | 'score' = 'acc'" in params  # declared as a Literal, read by the validation too
    assert "   What must vary within a group: ``acc`` (full correctness" in params
    assert main(["components", "filter"]) == 0
    listing = capsys.readouterr().out
    assert "min_tests: int = 0\n" in _cells(listing, 2) + "\n"
    assert "fewer hidden tests" in _cells(listing, 2)
    band = next(line for line in _cells(listing, 3).splitlines() if "min_pass_rate" in line)
    assert "``min_tests``" in band  # the first paragraph names the test-case filtering knobs
    assert main(["components", "data.filter", "band"]) == 0  # one component: its whole description
    out = capsys.readouterr().out
    assert out.startswith("difficulty_filter band  (config: data.filter: {name: band, ...})")
    assert "Paper Table 2" in out and "Attributes:" not in out  # the section is shown under each parameter
    assert "  min_tests: int = 0\n      Drop code records with fewer hidden tests" in out
    assert main(["components", "clip", "gppo2"]) == 2
    assert "unknown clip 'gppo2' (did you mean 'gppo'?)" in capsys.readouterr().err


def test_a_string_choice_declared_as_a_literal_is_checked_by_the_config():
    with pytest.raises(ConfigError, match=r"rl.group_filter.metric: expected one of 'acc', 'score', got str"):
        compose(None, ["rl.group_filter.metric=reward"])


def test_field_docs_read_attribute_docstrings_and_args_sections():
    @dataclass(frozen=True)
    class Documented:
        """Summary.

        Args:
            a: The first,
                over two lines.
            b (int): The second.

        More text.
        """

        a: int = 1
        c: str = "x"
        """The third."""
        b: int = 2

    assert field_docs(Documented) == {"a": "The first, over two lines.", "b": "The second.", "c": "The third."}
    assert split_doc("Summary.\n\nArgs:\n    a: x\n\nMore text.") == ("Summary.\n\nMore text.", {"a": "x"})


def test_config_keys_lists_keys_with_values_and_descriptions(capsys, tmp_path):
    """``config --help`` listed no keys and ``klear-lab config`` printed ``alpha: 0.1`` unexplained."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["config", "--help"])
    assert "--keys [PREFIX]" in capsys.readouterr().out
    assert main(["config", "--keys", "rl.alpha"]) == 0
    out = capsys.readouterr().out
    assert "│ rl.alpha │ 0.1   │ Weight of the SFT loss on fully correct rollouts (paper Eq. 13: 0.1). │" in out
    assert main(["config", "--keys", "rl.group_filter"]) == 0
    out = capsys.readouterr().out
    assert "rl.group_filter " in out and "`klear-lab components group_filter`" in out
    assert "rl.group_filter.metric │ acc" in out and "What must vary within a group" in out
    exp = tmp_path / "e.yaml"
    exp.write_text("run: {kind: rl}\nrl: {aggregation: seq-mean-token-mean}\n")
    assert main(["config", str(exp), "rl.alpha=0.3", "--keys", "rl"]) == 0
    out = capsys.readouterr().out
    assert "rl.aggregation " in out and "seq-mean-token-mean" in out and "rl.alpha  " in out and "0.3" in out
    assert main(["config", "--keys", "rl.alpa"]) == 2
    assert "no config key at or under 'rl.alpa' (did you mean 'rl.alpha'?)" in capsys.readouterr().err
    assert main(["config"]) == 2
    assert "--keys [PREFIX]" in capsys.readouterr().err


def test_every_shipped_component_parameter_has_a_description(capsys):
    """``klear-lab components source`` listed the sources, mixes, qwen2 and the rewards with bare parameters,
    and ``config --keys data.sources.0.n_prompts`` described nothing."""
    import dataclasses
    from pathlib import Path

    from klear_lab.registry import REGISTRIES

    shipped, missing = 0, []
    for axis, registry in REGISTRIES.items():
        for name in registry.names():
            cls = registry.get(name)
            if not cls.__module__.startswith("klear_lab."):  # a plugin another test registered
                continue
            shipped += 1
            docs = field_docs(cls)
            missing += [f"{axis} {name}: {f.name}" for f in dataclasses.fields(cls) if f.name not in docs]
    assert shipped > 30 and not missing, missing
    rl = Path(__file__).parents[3] / "experiments/quickstart/rl.yaml"
    assert main(["config", str(rl), "--keys", "data.sources.0.n_prompts"]) == 0
    out = capsys.readouterr().out
    assert ("│ data.sources.0.n_prompts │ 4000  │ Distinct prompts per split: ``n_prompts * responses_per_prompt`` "
            "train records, ``n_prompts`` eval records. │") in out


def test_an_unknown_component_points_to_this_commands_plugin_flag(capsys):
    """The registry's hint named a config's `plugins:`, which `klear-lab components` does not take."""
    assert main(["components", "clip", "my_clipx"]) == 2
    err = capsys.readouterr().err
    assert "unknown clip 'my_clipx'" in err and "klear-lab components clip my_clipx --plugin FILE.py" in err
    assert "`plugins:`" not in err
