"""An unlabelled file source's pool (what the data mix, the difficulty filter and decontamination see) keeps its
name, ``file``, ``file#1``: the mix draws each pool's records by a seed keyed by it, so renaming it would draw other
records for the configs of runs made before, under the same hash. What a user walkthrough found confusing about it
is said instead: errors about a pool name its config key and file, the ``weighted`` refusal says how file sources
are named, one file listed twice and two files whose records share a name are warned about."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from klear_lab.builders import build_train_records, pool_label
from klear_lab.config.compose import compose
from klear_lab.errors import ConfigError, DataError
from klear_lab.registry import SOURCE

SFT = Path(__file__).resolve().parents[3] / "experiments/quickstart/sft.yaml"


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def records_file(path: Path, n: int = 4, **extra) -> Path:
    return jsonl(path, [{"prompt": f"{path.stem} problem {i}", "answer": "1", "response": "r", **extra}
                        for i in range(n)])


def config(*sources: Path | str, overrides: tuple[str, ...] = ()) -> dict:
    nodes = ", ".join(s if isinstance(s, str) else f"{{name: file, path: {s}}}" for s in sources)
    return compose(SFT, [f"data.sources=[{nodes}]", *overrides])


def shares(stats: dict[str, float], kind: str) -> dict[str, float]:
    prefix = f"data/{kind}/"
    return {k[len(prefix):]: v for k, v in stats.items() if k.startswith(prefix)}


def test_unlabelled_file_pools_keep_their_names_and_labels_name_them(tmp_path):
    sft, msgs = records_file(tmp_path / "sft.jsonl"), records_file(tmp_path / "msgs.jsonl")
    _, stats = build_train_records(config(sft, msgs))
    assert set(shares(stats, "kept_frac")) == {"file", "file#1"}
    assert set(shares(stats, "mix_share")) == {"sft", "msgs"}  # the records' own names, as before
    labelled = (f"{{name: file, path: {sft}, label: sft}}", f"{{name: file, path: {msgs}, label: msgs}}")
    cfg = config(*labelled, overrides=("data.mix={name: weighted, weights: {sft: 1, msgs: 3}, budget: 4}",))
    _, stats = build_train_records(cfg)
    assert shares(stats, "kept_frac") == {"sft": 1.0, "msgs": 1.0}
    assert shares(stats, "mix_share") == {"msgs": 0.75, "sft": 0.25}


def test_weights_keyed_by_file_names_are_told_how_file_sources_are_named(tmp_path):
    sft, msgs = records_file(tmp_path / "sft.jsonl"), records_file(tmp_path / "msgs.jsonl")
    cfg = config(sft, msgs, overrides=("data.mix={name: weighted, weights: {sft: 1, msgs: 3}, budget: 4}",))
    with pytest.raises(ConfigError, match=r"configured: \['file', 'file#1'\] \(a file source is named by its label; "
                                          r"an unlabelled one `file`, then `file#N`.*; file is data.sources.0 "
                                          r"\(.*sft.jsonl\), file#1 is data.sources.1 \(.*msgs.jsonl\)"):
        build_train_records(cfg)


def test_two_files_whose_records_share_a_name_are_warned(tmp_path):
    a, b = records_file(tmp_path / "a/train.jsonl"), records_file(tmp_path / "b/train.jsonl")
    with pytest.warns(UserWarning, match=r"data.sources.0 \(.*a/train.jsonl\) and data.sources.1 "
                                         r"\(.*b/train.jsonl\) both name their records 'train', so "
                                         r"data/mix_share/train counts them as one"):
        build_train_records(config(a, b))
    labelled = f"{{name: file, path: {a}, label: a}}", f"{{name: file, path: {b}, label: b}}"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_train_records(config(*labelled))


def test_one_file_listed_twice_is_warned(tmp_path):
    a = records_file(tmp_path / "train.jsonl")
    with pytest.warns(UserWarning, match=r"data.sources.1 reads the same file as data.sources.0 \(.*train.jsonl\): "
                                         r"its records are drawn as two sources' \('file' and 'file#1'\)"):
        build_train_records(config(a, a))
    labelled = f"{{name: file, path: {a}, label: x}}", f"{{name: file, path: {a}, label: y}}"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # each with its own label: said on purpose
        build_train_records(config(*labelled))


def test_the_embedded_world_keeps_its_names(tmp_path):
    cfg = config("{name: arith_r1, n_prompts: 20}", "{name: arith_r1, n_prompts: 30}")
    records, stats = build_train_records(cfg)
    assert set(shares(stats, "kept_frac")) == {"arith_r1", "arith_r1#1"}
    assert {r.source for r in records} == {"arith_r1"}
    node = {"name": "file", "path": str(tmp_path / "d/sft.jsonl")}
    assert pool_label(SOURCE.build(node), node, 1, ["file"]) == "file#1"


def test_errors_about_a_file_source_name_its_key_and_file(tmp_path):
    sft, msgs = records_file(tmp_path / "sft.jsonl"), records_file(tmp_path / "msgs.jsonl")
    band = config(sft, msgs, overrides=("data.filter={name: band, min_pass_rate: 0.5}",))
    with pytest.raises(DataError, match=r"data.filter 'band' on source 'file' of data.sources.0 \(.*sft.jsonl\): "
                                        "min_pass_rate"):
        build_train_records(band)
    tied = config(sft, msgs, overrides=("data.mix={name: top_k, k: 1, budget: 4}",))
    with pytest.raises(ConfigError, match=r"tied at quality_rank 1 \(file, file#1\).*; file is data.sources.0 "
                                          r"\(.*sft.jsonl\), file#1 is data.sources.1 \(.*msgs.jsonl\)"):
        build_train_records(tied)


def test_decontamination_names_the_entry_and_file_of_a_pool_it_empties(tmp_path, capsys):
    prompts = ["Let a, b and c be positive reals with abc = 1. Find the least value of a^2 + b^2 + c^2.",
               "A frog jumps along the number line from 0, one unit left or right at random on every jump."]
    held = jsonl(tmp_path / "held.jsonl", [{"prompt": p, "answer": "1"} for p in prompts])
    sft = jsonl(tmp_path / "sft.jsonl", [{"prompt": p, "answer": "1", "response": "r"} for p in [*prompts, "Name 2."]])
    heldout = (f"data.eval_sources=[{{name: file, path: {held}, label: aime}}]", "data.decontaminate_ngram=9")
    _, stats = build_train_records(config(sft, overrides=heldout))
    assert stats["data/decontam_dropped_from/file"] == 2.0
    with pytest.raises(DataError, match=r"all 2 training records of source 'file#1', data.sources.1 "
                                        r"\(.*held.jsonl\), share a 9-word run"):
        build_train_records(config(sft, held, overrides=heldout))
