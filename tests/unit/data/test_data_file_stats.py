"""``run.json``'s ``data_files``: what tells a starting point's data unchanged without reading it again."""

from __future__ import annotations

import json
from pathlib import Path

import datasets

from klear_lab.config.compose import compose
from klear_lab.data.file_stats import data_file_stats

ROOT = Path(__file__).resolve().parents[3]
ROWS = [{"prompt": f"What is {i}+1?", "answer": str(i + 1)} for i in range(6)]


def _cfg(tmp_path, path: str) -> dict:
    return compose({"base": str(ROOT / "experiments/quickstart/sft.yaml"),
                    "data": {"sources": [{"name": "file", "path": path}], "eval_sources": []}},
                   [f"run.out_dir={tmp_path}"])


def test_a_dataset_directory_is_known_by_its_files(tmp_path):
    """A ``save_to_disk`` directory: every file in it, so an edited shard or a file added tells it changed
    (it was read again in every trial of a sweep to compare its records' digests)."""
    directory = tmp_path / "ds"
    datasets.Dataset.from_list(ROWS).save_to_disk(str(directory))
    stats = data_file_stats(_cfg(tmp_path, str(directory)))
    assert stats is not None and len(stats) >= 2  # the arrow shard, and the dataset's own json files
    assert all(key.startswith(str(directory.resolve())) for key in stats)
    assert data_file_stats(_cfg(tmp_path, str(directory))) == stats

    (directory / "notes.txt").write_text("a file added")
    assert set(data_file_stats(_cfg(tmp_path, str(directory)))) - set(stats) == {str(directory / "notes.txt")}
    datasets.Dataset.from_list(ROWS[:3]).save_to_disk(str(tmp_path / "other"))
    linked = tmp_path / "split"  # a split folder linked in, as load_from_disk follows it
    linked.mkdir()
    (linked / "part.arrow").write_bytes(b"x")
    (directory / "test").symlink_to(linked)
    assert str((linked / "part.arrow").resolve()) in data_file_stats(_cfg(tmp_path, str(directory)))
    shard = next(directory.glob("*.arrow"))
    shard.write_bytes(next((tmp_path / "other").glob("*.arrow")).read_bytes())
    assert data_file_stats(_cfg(tmp_path, str(directory)))[str(shard.resolve())] != stats[str(shard.resolve())]


def test_a_file_and_what_cannot_be_known(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    stat = data.stat()
    assert data_file_stats(_cfg(tmp_path, str(data))) == {
        str(data.resolve()): [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]}
    assert data_file_stats(compose(ROOT / "experiments/quickstart/sft.yaml")) is None  # the generated world
    cfg = _cfg(tmp_path, str(data))
    data.unlink()
    assert data_file_stats(cfg) is None  # a file gone: nothing to compare


def test_a_file_edited_and_dated_back_is_not_taken_for_unchanged(tmp_path):
    """Size and mtime can be put back (``touch -r``, ``cp -p``): a walkthrough's RL run then took a starting
    point trained on other records for one trained on the file's."""
    import os
    import time

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    before = data.stat()
    stats = data_file_stats(_cfg(tmp_path, str(data)))
    time.sleep(0.01)
    data.write_text(data.read_text().replace("What is 0+1", "What is 9+1"))  # the same size
    os.utime(data, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = data.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert data_file_stats(_cfg(tmp_path, str(data))) != stats


def test_a_run_from_before_the_change_time_was_kept_is_compared_by_size_and_mtime(tmp_path):
    """Its ``data_files`` hold [size, mtime_ns]: compared whole with three fields, it never matched, and every
    sweep trial read a paper-scale corpus again to check it (a red team)."""
    from klear_lab.starting_point import files_unchanged

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    cfg = _cfg(tmp_path, str(data))
    now = data_file_stats(cfg)
    run = tmp_path / "run"
    run.mkdir()
    for kept, same in (({f: v[:2] for f, v in now.items()}, True), (now, True),
                       ({f: [v[0] + 1, v[1]] for f, v in now.items()}, False)):
        (run / "run.json").write_text(json.dumps({"data_files": kept}))
        assert files_unchanged(run, cfg) is same
