"""``--dry-run`` refuses the data-mix and held-out-name mistakes the config alone decides, in the run's words and
with its exit code (it said "ready" and the run stopped with exit 2): a ``top_k`` cut between sources of one
quality rank, ``weighted`` keys naming no source, two held-out entries reading one file unlabelled, a label named
as a difficulty level. Two unlabelled held-out files of one name (``aime24/test.jsonl``, ``aime25/test.jsonl``)
clash only if their rows name no source, which a dry run does not read: a warning row, not a refusal."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from klear_lab.builders import build_run_records
from klear_lab.cli import main
from klear_lab.config.compose import compose
from klear_lab.dry_run_data import DATA_NOT_READ, data_problems, data_rows

ROOT = Path(__file__).resolve().parents[3]
SFT = ROOT / "experiments/quickstart/sft.yaml"


def _jsonl(path: Path, source: str | None = None) -> Path:
    """Three math rows (each naming ``source`` where given)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"prompt": f"{i}+7=", "answer": str(i + 7), "response": f"<think>.</think> \\boxed{{{i + 7}}}",
             **({"source": source} if source else {})} for i in range(3)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _two_files(tmp_path: Path, second: str = "") -> str:
    a, b = _jsonl(tmp_path / "a/sft.jsonl"), _jsonl(tmp_path / "b/sft.jsonl")
    return f"data.sources=[{{name: file, path: {a}}}, {{name: file, path: {b}{second}}}]"


def _heldout(*entries: str) -> str:
    return f"data.eval_sources=[{', '.join(f'{{name: file, {e}}}' for e in entries)}]"


def _cfg(*overrides: str) -> dict:
    return compose(SFT, [*overrides, "data.decontaminate_ngram=0", "data.max_length=512"])


def _run_refusal(cfg: dict) -> Exception | None:
    """What the run refuses as it builds its records from the files (None: it builds them)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            build_run_records(cfg, quiet=True)
    except Exception as exc:  # noqa: BLE001 - compared below
        return exc
    return None


def test_a_top_k_cut_between_two_files_of_rank_one_fails_the_dry_run_as_the_run(tmp_path, capsys):
    sources = _two_files(tmp_path)
    args = ["train", str(SFT), sources, "data.mix={name: top_k, k: 1, budget: 4}", f"run.out_dir={tmp_path}"]
    assert main([*args, "--dry-run"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    said = ("data mix: NOT SUPPORTED: data.mix 'top_k': k=1 would keep some and drop others of the sources tied at "
            "quality_rank 1 (file, file#1)")
    assert said in err, err
    assert f"file is data.sources.0 ({tmp_path}/a/sft.jsonl), file#1 is data.sources.1 ({tmp_path}/b/sft.jsonl)" in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("mix", [
    "{name: top_k, k: 1, budget: 4}",  # two files of rank 1
    "{name: top_k, k: 3, budget: 4}",  # more than there are
    "{name: weighted, weights: {a: 1, b: 2}, budget: 4}",  # unlabelled files are `file`, `file#1`
])
def test_a_refused_mix_is_said_in_the_run_s_words(tmp_path, mix):
    cfg = _cfg(_two_files(tmp_path), f"data.mix={mix}")
    exc = _run_refusal(cfg)
    assert type(exc).__name__ == "ConfigError"
    assert data_problems(cfg) == [("data mix", str(exc))]


@pytest.mark.parametrize(("second", "mix"), [
    (", quality_rank: 2", "{name: top_k, k: 1, budget: 4}"),  # distinct ranks: the best one kept
    ("", "{name: top_k, k: 0, budget: 4}"),  # all of them
    ("", "{name: top_k, k: 2, budget: 4}"),
    ("", "{name: weighted, weights: {file: 1, 'file#1': 2}, budget: 4}"),
    (", label: b", "{name: weighted, weights: {b: 1}, budget: 4}"),
    ("", "{name: all}"),
])
def test_a_mix_the_run_accepts_is_ready(tmp_path, second, mix):
    cfg = _cfg(_two_files(tmp_path, second), f"data.mix={mix}")
    assert _run_refusal(cfg) is None
    assert data_rows(cfg) == [DATA_NOT_READ]


def test_an_eval_run_mixes_nothing_and_is_not_refused_for_its_mix(tmp_path):
    cfg = _cfg(_two_files(tmp_path), "data.mix={name: top_k, k: 1, budget: 4}")
    cfg["run"]["kind"] = "eval"
    assert data_problems(cfg) == []


def test_a_plugin_mix_without_check_sources_is_left_to_the_run(tmp_path, registries_restored):
    from dataclasses import dataclass

    from klear_lab.registry import DATA_MIX

    @DATA_MIX.register("first_only")
    @dataclass(frozen=True)
    class FirstOnly:
        def __call__(self, pools, ranks, seed):
            return pools[sorted(pools)[0]]

    assert data_problems(_cfg(_two_files(tmp_path), "data.mix={name: first_only}")) == []


def test_one_file_read_unlabelled_by_two_heldout_entries_fails_the_dry_run(tmp_path, capsys):
    """Whatever names the rows give their records, both entries give them alike: certain from the config."""
    test = _jsonl(tmp_path / "aime24/test.jsonl", source="aime24")
    heldout = _heldout(f"path: {test}", f"path: {test}, limit: 2")
    assert type(_run_refusal(_cfg(heldout))).__name__ == "DataError"
    assert main(["train", str(SFT), heldout, f"run.out_dir={tmp_path}", "--dry-run"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (f"held-out sources: NOT SUPPORTED: data.eval_sources.0 ({test}) and data.eval_sources.1 ({test}) read "
            "one file without a label") in err, err


def test_a_heldout_label_named_as_a_difficulty_level_is_refused_in_the_run_s_words(tmp_path):
    cfg = _cfg(_heldout(f"path: {_jsonl(tmp_path / 'test.jsonl')}, label: level2"))
    exc = _run_refusal(cfg)
    assert type(exc).__name__ == "DataError"
    assert data_problems(cfg) == [("held-out sources", str(exc))]


@pytest.mark.parametrize("source", [None, "aime"])
def test_two_unlabelled_test_files_are_a_warning_as_only_their_rows_decide(tmp_path, source):
    """Rows without a source column: the run refuses (both records are named ``test``); with one: it accepts.
    Either way the dry run warns and does not refuse."""
    a = _jsonl(tmp_path / "aime24/test.jsonl", source=source and "aime24")
    b = _jsonl(tmp_path / "aime25/test.jsonl", source=source and "aime25")
    cfg = _cfg(_heldout(f"path: {a}", f"path: {b}"))
    exc = _run_refusal(cfg)
    assert (exc is None) == bool(source)
    rows = data_rows(cfg)
    assert data_problems(cfg) == [] and rows[-1] == DATA_NOT_READ and len(rows) == 2
    key, value = rows[0]
    assert key == "held-out record names" and value.startswith("refused by the run if the files' rows name no source")
    assert (f"data.eval_sources.0 ({a}) and data.eval_sources.1 ({b}) both name their records 'test'") in value
    assert "NOT SUPPORTED" not in value


@pytest.mark.parametrize("entries", [
    ("label: aime24", "label: aime25"),
    ("label: aime", "label: aime"),  # one label on both: meant as one source
    ("", "label: aime25"),  # aime24/test.jsonl: `test`, unless its rows say
])
def test_labelled_heldout_files_are_ready(tmp_path, entries):
    a, b = _jsonl(tmp_path / "aime24/test.jsonl"), _jsonl(tmp_path / "aime25/test.jsonl")
    cfg = _cfg(_heldout(*(f"path: {p}" + (f", {e}" if e else "") for p, e in zip((a, b), entries, strict=True))))
    assert _run_refusal(cfg) is None
    assert data_rows(cfg) == [DATA_NOT_READ]


def test_a_plugin_source_without_a_quality_rank_is_named_by_the_run_and_the_dry_run(tmp_path, capsys,
                                                                                   registries_restored):
    """The mixes rank sources by it: the run failed with an AttributeError (exit 1), and the dry run too (a review)."""
    plugin = tmp_path / "rankless_src.py"
    plugin.write_text("from dataclasses import dataclass\nfrom klear_lab.registry import SOURCE\n\n\n"
                      "@SOURCE.register('rankless_src')\n@dataclass(frozen=True)\nclass Rankless:\n"
                      "    def records(self, seed, split):\n        return []\n")
    args = [f"plugins=[{plugin}]", "data.sources=[{name: rankless_src}]"]
    with pytest.raises(Exception, match=r"^data\.sources\.0 'rankless_src' \(.*rankless_src\.py:\d+\) has no "
                                        "quality_rank attribute"):
        build_run_records(compose(SFT, args))
    assert main(["train", str(SFT), *args, "--dry-run"]) == 2
    assert "has no quality_rank attribute" in capsys.readouterr().err
