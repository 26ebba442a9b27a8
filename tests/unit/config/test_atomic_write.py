"""``atomic_write`` puts the new file's data on disk before renaming it over the old one."""

from __future__ import annotations

import os

from klear_lab import tracking


def test_the_data_is_synced_before_the_rename(tmp_path, monkeypatch):
    """Renamed before its data reached the disk, a host crash could leave ``run.json`` (or a checkpoint)
    under its name but empty."""
    calls: list[str] = []
    fsync, replace = os.fsync, os.replace

    def synced(fd: int) -> None:
        calls.append("fsync " + os.readlink(f"/proc/self/fd/{fd}"))
        fsync(fd)

    def replaced(src, dst) -> None:
        calls.append("replace")
        replace(src, dst)

    monkeypatch.setattr(os, "fsync", synced)
    monkeypatch.setattr(os, "replace", replaced)
    path = tmp_path / "run.json"
    tracking.write_json(path, {"status": "running"})
    assert path.read_text().strip().startswith("{")
    tmp_synced = [c for c in calls[:calls.index("replace")] if c.startswith(f"fsync {tmp_path}/.run.json.tmp")]
    assert tmp_synced and calls[calls.index("replace") + 1:] == [f"fsync {tmp_path}"]  # then the directory
