"""``klear-lab components filter`` lists the ``data.filter`` axis, but its footer told to run ``klear-lab components
difficulty_filter NAME``: the footer's command names the axis as typed (a config key, its last part, the axis), and
each axis by its own name where the word named several (``rl``), whose NAME form is refused."""

from __future__ import annotations

import pytest

from klear_lab.cli import main


def _footers(out: str) -> list[str]:
    return [line.strip() for line in out.splitlines() if "NAME: a component's whole description" in line]


@pytest.mark.parametrize("word", ["filter", "data.filter", "difficulty_filter"])
def test_the_footer_echoes_the_word_typed(word, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["components", word]) == 0
    assert _footers(capsys.readouterr().out) == [f"klear-lab components {word} NAME: a component's whole description"]
    assert main(["components", word, "band"]) == 0  # the command it gives works


def test_a_section_names_each_axis(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["components", "rl"]) == 0
    footers = _footers(capsys.readouterr().out)
    assert footers[0] == "klear-lab components clip NAME: a component's whole description"
    assert not any("components rl NAME" in f for f in footers)
