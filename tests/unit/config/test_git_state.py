"""``git_commit``: the commit a run records, ``+dirty`` when the code it ran is not all in that commit."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from klear_lab.git_state import git_commit

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(repo, *args):
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": "/usr/bin:/bin", "HOME": str(repo)}
    return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "clip.py").write_text("x = 1\n")
    (tmp_path / ".gitignore").write_text("__pycache__/\n")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "first")
    return tmp_path


def test_a_new_module_in_the_package_is_dirty_and_ignored_or_outside_files_are_not(repo):
    head = _git(repo, "rev-parse", "HEAD")
    assert git_commit(repo / "pkg") == head
    (repo / "notes.txt").write_text("elsewhere in the repository\n")
    (repo / "pkg" / "__pycache__").mkdir()
    (repo / "pkg" / "__pycache__" / "clip.pyc").write_text("ignored\n")
    assert git_commit(repo / "pkg") == head
    (repo / "pkg" / "my_clip.py").write_text("registered but not committed\n")
    assert git_commit(repo / "pkg") == f"{head}+dirty"


def test_a_changed_tracked_file_anywhere_is_dirty(repo):
    (repo / ".gitignore").write_text("__pycache__/\n*.log\n")
    assert git_commit(repo / "pkg") == _git(repo, "rev-parse", "HEAD") + "+dirty"


def test_outside_a_repository_it_is_unknown(tmp_path):
    assert git_commit(tmp_path) == "unknown"
