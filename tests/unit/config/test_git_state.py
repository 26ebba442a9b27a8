"""``git_commit``: the commit a run records, ``+dirty`` when the code it ran is not all in that commit."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from klear_lab.git_state import git_commit, save_code_diff

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


def test_a_dirty_runs_diff_is_saved_and_applies_to_its_commit(repo, tmp_path_factory):
    """A ``+dirty`` commit named no diff: the code the run ran was lost once the tree changed (a review).
    ``code.diff`` holds the tracked changes and the new package files, and applies at the commit."""
    head = _git(repo, "rev-parse", "HEAD")
    run_dir = tmp_path_factory.mktemp("run")
    assert save_code_diff(run_dir, git_commit(repo / "pkg"), path=repo / "pkg") is None  # clean: nothing written
    assert list(run_dir.iterdir()) == []
    (repo / "pkg" / "clip.py").write_text("x = 2\n")
    (repo / "pkg" / "my_clip.py").write_text("registered but not committed\n")
    (repo / "notes.txt").write_text("not the package's\n")
    commit = git_commit(repo / "pkg")
    assert save_code_diff(run_dir, commit, path=repo / "pkg") == "code.diff"
    assert save_code_diff(run_dir, commit, attempt=2, path=repo / "pkg") == "code-attempt-2.diff"
    diff = (run_dir / "code.diff").read_text()
    assert "+x = 2" in diff and "pkg/my_clip.py" in diff and "notes.txt" not in diff
    clone = tmp_path_factory.mktemp("clone")
    _git(clone, "clone", "-q", str(repo), ".")
    _git(clone, "checkout", "-q", head)
    _git(clone, "apply", str(run_dir / "code.diff"))
    assert (clone / "pkg" / "clip.py").read_text() == "x = 2\n"
    assert (clone / "pkg" / "my_clip.py").read_text() == "registered but not committed\n"
