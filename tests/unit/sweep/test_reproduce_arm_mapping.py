"""``klear-lab reproduce`` on a sweep the analysis does not list (a shrunk copy of a shipped sweep): the
listed sweep's ``arms:`` map still applies, an arm left unmapped says how to map it, and a sweep with no
arm for the baseline is named once."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from sweep_fixtures import write_spec
from test_reproduce import records

from klear_lab.analysis import _ref_for
from klear_lab.analysis.report import claim_header
from klear_lab.analysis.reproduce import reproduce
from klear_lab.analysis.spec import load_analysis
from klear_lab.errors import ConfigError
from klear_lab.sweep.spec import load_spec


def write_analysis(tmp: Path, arms: dict[str, str] | None) -> Path:
    """Paper arms 0.001 (baseline), 0.002, 0.003; the listed sweep ``full`` runs lr 0.001, 0.002, 0.004, its
    lr=0.004 standing for the paper's 0.003 through ``arms:`` (as sft_sources' ``k=all`` for ``top10``); with
    no ``arms``, lr 0.001, 0.002, 0.003."""
    write_spec(tmp, name="full", lrs=(0.001, 0.002, 0.004 if arms else 0.003), seeds=(0, 1))
    entry = {"spec": "full.yaml", "arms": arms} if arms else "full.yaml"
    body = {"title": "Toy", "benchmarks": ["A"], "paper": {"0.001": [1.0], "0.002": [2.0], "0.003": [3.0]},
            "baseline": "0.001", "claims": [{"better": "0.003", "than": "0.001", "text": "0.003 beats 0.001"}],
            "sweeps": [entry]}
    path = tmp / "analysis.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path




def test_a_shrunk_copy_keeps_the_listed_sweeps_arms_map(tmp_path):
    analysis = load_analysis(write_analysis(tmp_path, {"lr=0.004": "0.003"}))
    mine = load_spec(write_spec(tmp_path, name="mine", lrs=(0.001, 0.004), seeds=(0, 1)))  # a copy, arms cut
    ref = _ref_for(analysis, mine, Path(mine.path))
    assert ref.label_of == {"0.001": "lr=0.001", "0.003": "lr=0.004"}
    rep = reproduce(analysis, ref, mine, records({"lr=0.001": [0.1, 0.11], "lr=0.004": [0.3, 0.31]}))
    assert rep.claims["verdict"].tolist() == ["reproduced"]
    assert rep.arms["arm"].tolist() == ["0.001", "0.002", "0.003"]  # no stray row for lr=0.004


def test_an_unmapped_arm_says_how_to_map_it(tmp_path):
    analysis = load_analysis(write_analysis(tmp_path, None))
    mine = load_spec(write_spec(tmp_path, name="mine", lrs=(0.001, 0.004), seeds=(0, 1)))
    ref = _ref_for(analysis, mine, Path(mine.path))
    rep = reproduce(analysis, ref, mine, records({"lr=0.001": [0.1, 0.11], "lr=0.004": [0.3, 0.31]}))
    [said] = rep.claims["verdict"].tolist()
    assert said.startswith("no result (0.003: not an arm of this sweep; sweep arm(s) lr=0.004 stand for no paper arm")
    assert '`arms: {"lr=0.004": 0.003}`' in said and str(analysis.path) in said
    assert "seeds (better/than)" in claim_header(rep)  # "2/0" in that column: 2 seeds of 0.003's side... none


def test_no_baseline_arm_names_the_sweep_once(tmp_path):
    analysis = load_analysis(write_analysis(tmp_path, None))
    other = load_spec(write_spec(tmp_path, name="other", lrs=(0.002, 0.004)))
    with pytest.raises(ConfigError) as caught:
        _ref_for(analysis, other, Path(other.path))
    message = str(caught.value)
    assert f"no arm of the sweep in {other.sweep_dir} matches the baseline '0.001'" in message
    assert "spec.yaml" not in message and "sweep " + str(other.path) not in message
    assert '`- {spec: ' in message and '"lr=0.002": "0.001"' in message  # the entry to add, spelled out


def test_the_entry_to_add_names_the_spec_from_the_analysis_files_folder(tmp_path, monkeypatch):
    """Pasted into an analysis under ``analysis/``, a path relative to the working directory did not resolve
    (a fresh-user walkthrough): spec paths are read from the analysis file's folder."""
    text = write_analysis(tmp_path, None).read_text().replace("full.yaml", "../full.yaml")
    (tmp_path / "analysis").mkdir()
    (tmp_path / "analysis" / "mine.yaml").write_text(text)
    analysis = load_analysis(tmp_path / "analysis" / "mine.yaml")
    other = load_spec(write_spec(tmp_path, name="other", lrs=(0.002, 0.004)))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"`- \{spec: \.\./other\.yaml, arms: "):
        _ref_for(analysis, other, Path(other.path))
