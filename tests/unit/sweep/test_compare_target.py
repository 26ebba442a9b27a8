"""``klear-lab compare``: the target after ``--rescore K=V ...`` (the usage line's order once, and argparse's
"required: target"), and a file that is no sweep spec (read as YAML: "expected '<document start>'")."""

from __future__ import annotations

import pytest
from sweep_fixtures import write_spec

from klear_lab.cli import main
from klear_lab.sweep.spec import load_spec
from klear_lab.sweep.storage import default_storage_url, open_study


@pytest.fixture
def rescored(monkeypatch):
    """What ``compare --rescore`` would score: the sweep it found and the overrides (nothing is scored)."""
    from klear_lab.sweep import rescore

    seen = {}

    def fake_rescore(spec, study, overrides, out_dir=None):
        seen.update(sweep=spec.sweep_dir, overrides=list(overrides))
        return None, 0

    monkeypatch.setattr(rescore, "rescore_study", fake_rescore)
    return seen


def _sweep_with_a_study(tmp_path):
    path = write_spec(tmp_path)
    spec = load_spec(path)
    open_study(spec, default_storage_url(spec), create=True)
    return path, spec


@pytest.mark.parametrize("target_first", [True, False])
def test_rescore_takes_the_target_before_or_after_it(tmp_path, rescored, target_first):
    path, spec = _sweep_with_a_study(tmp_path)
    rescore = ["--rescore", "eval.samples=4", "eval.temperature=0.6"]
    assert main(["compare", str(path), *rescore] if target_first else ["compare", *rescore, str(path)]) == 0
    assert rescored == {"sweep": spec.sweep_dir, "overrides": ["eval.samples=4", "eval.temperature=0.6"]}


def test_a_target_path_holding_an_equals_sign_is_the_target(tmp_path, rescored, monkeypatch):
    """A sweep directory named after a value (``lr=0.1``), given after ``--rescore``: a path, not an override."""
    odd = tmp_path / "lr=0.1"
    odd.mkdir()
    path, spec = _sweep_with_a_study(odd)
    assert main(["compare", "--rescore", "eval.samples=4", str(path)]) == 0
    assert rescored == {"sweep": spec.sweep_dir, "overrides": ["eval.samples=4"]}
    monkeypatch.chdir(tmp_path)  # relative, it starts like a key (lr=...): the target, as that path exists
    assert main(["compare", "--rescore", "eval.samples=4", str(path.relative_to(tmp_path))]) == 0
    assert rescored["overrides"] == ["eval.samples=4"]


def test_compare_says_what_is_missing(tmp_path, capsys):
    assert main(["compare", "--rescore", "eval.samples=4", str(tmp_path / "gone")]) == 2  # the target, not "required"
    assert f"{tmp_path / 'gone'}: no such sweep directory or spec file" in capsys.readouterr().err
    assert main(["compare", "--rescore", str(tmp_path)]) == 2  # the target alone: no override left
    assert "--rescore takes at least one KEY=VALUE" in capsys.readouterr().err
    assert main(["compare"]) == 2
    assert "compare: no sweep given" in capsys.readouterr().err


def test_the_usage_line_shows_the_target_first(capsys):
    with pytest.raises(SystemExit):
        main(["compare", "-h"])
    assert "usage: klear-lab compare [-h] TARGET [--baseline ARM]" in " ".join(capsys.readouterr().out.split())


def test_a_file_that_is_no_sweep_spec_says_what_compare_takes(tmp_path, capsys):
    records = tmp_path / "some.jsonl"
    records.write_text('{"a": 1}\n{"a": 2}\n')
    assert main(["compare", str(records)]) == 2
    err = capsys.readouterr().err
    assert f"{records}: not a sweep directory or sweep spec: give a sweep directory" in err and "YAML" not in err
    bad = tmp_path / "bad.yaml"  # a spec that is malformed still says where
    bad.write_text("a: [1\n")
    assert main(["compare", str(bad)]) == 2
    assert f"{bad}:2:1: malformed YAML" in capsys.readouterr().err
