"""The sweep's up-front data check: the records each distinct data configuration gives are built once,
before any trial (``data_checks.check_trial_data``), for ``--validate-only`` and a real sweep alike."""

from __future__ import annotations

import json
import warnings

import pytest
from sweep_fixtures import write_spec

from klear_lab.cli_sweep import main

GOOD = {"prompt": "1+1=", "answer": "2", "response": "2"}


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _file_source(path) -> str:
    return f"data.sources=[{{name: file, path: {path}, format: records}}]"


def test_a_bad_row_in_the_overrides_data_stops_validation_and_the_sweep_before_any_trial(tmp_path, capsys):
    """--validate-only said OK ("2 arm(s) x 2 seed(s) = 4 trials"), then each of the 4 trials failed on
    ``DataError: ...: row 3: field 'answer': missing`` and the sweep exited 1 (a user review)."""
    bad = _jsonl(tmp_path / "missing.jsonl", [GOOD, GOOD, {"prompt": "3+3="}])
    spec = write_spec(tmp_path, lrs=(0.001, 0.002), seeds=(0, 1), overrides=[_file_source(bad)])
    for args in (["--validate-only"], []):
        assert main(["sweep", str(spec), *args]) == 2
        err = capsys.readouterr().err
        assert f"{bad}: row 3: field 'answer': missing" in err, err
        assert "data.sources.0, read by every arm (overrides: data.sources=" in err and "no trial was started" in err
    assert not (tmp_path / "out" / "toy" / "study.db").exists()  # refused before the study


def test_a_bad_file_on_a_data_axis_names_the_arm_that_reads_it(tmp_path, capsys):
    good = _jsonl(tmp_path / "good.jsonl", [GOOD])
    bad = _jsonl(tmp_path / "bad.jsonl", [GOOD, {"answer": "2"}])
    spec = write_spec(tmp_path, overrides=[_file_source(good)], axes={"data.sources.0.path": [str(good), str(bad)]})
    assert main(["sweep", str(spec), "--validate-only"]) == 2
    err = capsys.readouterr().err
    assert f"data.sources.0, read by arm path={bad} (overrides: data.sources=" in err, err
    assert f"{bad}: row 2:" in err and "every arm" not in err


def test_tpe_reads_each_value_of_a_data_axis(tmp_path, capsys):
    good = _jsonl(tmp_path / "good.jsonl", [GOOD])
    bad = _jsonl(tmp_path / "bad.jsonl", [{"prompt": "p"}])
    spec = write_spec(tmp_path, overrides=[_file_source(good)], sampler="tpe", n_trials=4,
                      axes={"optim.lr": {"low": 0.001, "high": 0.01}, "data.sources.0.path": [str(good), str(bad)]})
    assert main(["sweep", str(spec), "--validate-only"]) == 2
    err = capsys.readouterr().err
    assert f"data.sources.0, read by trials with data.sources.0.path={str(bad)!r} (overrides:" in err, err
    assert f"{bad}: row 1: field 'answer': missing" in err


def test_each_data_file_is_read_once_and_its_warnings_shown_once(tmp_path, monkeypatch, capsys):
    """4 arms over ``data.max_length`` and ``optim.lr``, one data file: read once (building each arm's mix
    read a paper-scale corpus once per arm); its repeated uid warns once, not once per read."""
    from klear_lab.data.sources.file import FileSource

    rows = [{**GOOD, "uid": "u1"}, {**GOOD, "uid": "u1"}, {**GOOD, "uid": "u2"}]
    data = _jsonl(tmp_path / "dup.jsonl", rows)
    reads = []
    real = FileSource.records
    monkeypatch.setattr(FileSource, "records", lambda self, seed, split: reads.append((self.path, split))
                        or real(self, seed, split))
    spec = write_spec(tmp_path, overrides=[_file_source(data)],
                      axes={"optim.lr": [0.001, 0.002], "data.max_length": [64, 128]})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["sweep", str(spec), "--validate-only"]) == 0, capsys.readouterr().err
    assert reads == [(str(data), "train")]
    repeated = [w for w in caught if "repeat an earlier row's uid" in str(w.message)]
    assert len(repeated) == 1, [str(w.message) for w in caught]
    assert "4 arm(s) x 1 seed(s) = 4 trials" in capsys.readouterr().out


def test_data_this_machine_lacks_stays_a_note_of_validation(tmp_path, capsys):
    """A file that is not here is not read (the spec may be meant for another machine): still a note."""
    spec = write_spec(tmp_path, overrides=[_file_source(tmp_path / "elsewhere.jsonl")])
    assert main(["sweep", str(spec), "--validate-only"]) == 0
    assert "note: data this machine cannot read" in capsys.readouterr().out


@pytest.mark.parametrize(("name", "text"), [("empty.jsonl", ""), ("empty.json", "[]"), ("blank.jsonl", "\n \n"),
                                            ("empty.parquet", None)])
def test_a_data_source_with_no_records_stops_validation_and_the_sweep_before_any_trial(tmp_path, capsys, name, text):
    """--validate-only said OK, then every trial failed on ``DataError: data.sources produced no training records
    (file: 0)`` (exit 1), the refusal ``klear-lab train`` makes at its start (a user review)."""
    empty = tmp_path / "data" / name
    empty.parent.mkdir()
    if text is None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"prompt": pa.array([], pa.string()), "answer": pa.array([], pa.string())}), empty)
    else:
        empty.write_text(text)
    spec = write_spec(tmp_path, overrides=[_file_source(empty), "data.eval_sources.0.n_prompts=4"])
    for args in (["--validate-only"], []):
        assert main(["sweep", str(spec), *args]) == 2
        err = capsys.readouterr().err
        assert f"{spec}: data.sources, read by every arm (overrides: {_file_source(empty)}; " \
               "data.eval_sources.0.n_prompts=4): data.sources produced no training records (file: 0); " \
               f"read {empty}; no trial was started" in err, err
        assert err.count("overrides:") == 1, err
        assert not (tmp_path / "out").exists()  # no study, sweep directory or trial log


def test_an_empty_file_beside_other_sources_is_refused_as_a_run_refuses_it(tmp_path, capsys):
    """The generated world is not read by the check: taken as giving records, as it does."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    spec = write_spec(tmp_path, overrides=[f"data.sources=[{{name: arith}}, {{name: file, path: {empty}}}]"])
    assert main(["sweep", str(spec), "--validate-only"]) == 2
    err = capsys.readouterr().err
    assert f"data.sources.1 ({empty}): no train records (an empty file?) while the other sources have some" in err
    assert not (tmp_path / "out").exists()


def test_an_empty_eval_file_on_an_axis_names_the_arm_that_reads_it(tmp_path, capsys):
    good = _jsonl(tmp_path / "good.jsonl", [GOOD])
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    spec = write_spec(tmp_path, overrides=[f"data.eval_sources=[{{name: file, path: {good}}}]"],
                      axes={"data.eval_sources.0.path": [str(good), str(empty)]})
    for args in (["--validate-only"], []):
        assert main(["sweep", str(spec), *args]) == 2
        err = capsys.readouterr().err
        assert f"{spec}: data.eval_sources, read by arm path={empty} (overrides: data.eval_sources=" in err, err
        assert f"data.eval_sources gave no eval records; read {empty}; no trial was started" in err, err
        assert not (tmp_path / "out").exists()


def test_an_eval_run_is_not_refused_for_training_sources_it_does_not_read(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    spec = write_spec(tmp_path, overrides=["run.kind=eval", _file_source(empty)])
    assert main(["sweep", str(spec), "--validate-only"]) == 0, capsys.readouterr().err


def test_a_source_decontamination_would_empty_stops_the_sweep_before_any_trial(tmp_path, capsys):
    """With ``data.decontaminate_ngram`` on, the held-out file read as training data: --validate-only said OK,
    then every trial (an RL sweep: after training its starting point) refused its data."""
    rows = [{"prompt": f"Compute the sum of the first {k} odd numbers and then add {k} to the result please.",
             "answer": "1", "response": "1"} for k in range(3)]
    same = _jsonl(tmp_path / "same.jsonl", rows)
    other = _jsonl(tmp_path / "other.jsonl", [{"prompt": "Name a prime number below ten.", "answer": "2"}])
    base = [_file_source(same), f"data.eval_sources=[{{name: file, path: {same}, format: records}}]"]
    spec = write_spec(tmp_path, overrides=[*base, "data.decontaminate_ngram=9"])
    assert main(["sweep", str(spec), "--validate-only"]) == 2
    err = capsys.readouterr().err
    assert "data.decontaminate_ngram, read by every arm" in err and "no trial was started" in err, err
    assert "data.decontaminate_ngram=9: all 3 training records of source" in err
    assert f", data.sources.0 ({same})," in " ".join(err.split()), err  # its entry, as the run names it
    fine = write_spec(tmp_path, name="fine", overrides=[_file_source(same), "data.decontaminate_ngram=9",
                                                       f"data.eval_sources=[{{name: file, path: {other}}}]"])
    assert main(["sweep", str(fine), "--validate-only"]) == 0, capsys.readouterr().err


def test_a_level_objective_no_held_out_record_gives_is_refused(tmp_path, capsys):
    """Held-out files without a ``difficulty`` column log no ``val/level1/acc`` (it was val/acc again): a sweep
    with it as objective passed validation, then every trial finished without its objective (a review)."""
    plain = _jsonl(tmp_path / "plain.jsonl", [GOOD])
    levelled = _jsonl(tmp_path / "levelled.jsonl", [{**GOOD, "difficulty": 1}])
    level = {"objective": {"metric": "val/level1/acc", "direction": "maximize"}}
    spec = write_spec(tmp_path, overrides=[f"data.eval_sources=[{{name: file, path: {plain}}}]"], **level)
    assert main(["sweep", str(spec), "--validate-only"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert ("data.eval_sources, read by every arm (overrides: data.eval_sources=" in err and "no held-out record is "
            "of the difficulty level val/level1/acc scores (levels given: none: no `difficulty` column)" in err), err
    fine = write_spec(tmp_path, name="fine", overrides=[f"data.eval_sources=[{{name: file, path: {levelled}}}]"],
                      **level)
    assert main(["sweep", str(fine), "--validate-only"]) == 0, capsys.readouterr().err
