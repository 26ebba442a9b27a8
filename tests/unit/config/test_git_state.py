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


def _apply_at(repo, commit, diff, clone):
    _git(clone, "clone", "-q", str(repo), ".")
    _git(clone, "checkout", "-q", commit)
    _git(clone, "apply", str(diff))


def test_a_dirty_runs_diff_is_saved_and_applies_to_its_commit(repo, tmp_path_factory, capsys):
    """A ``+dirty`` commit named no diff: the code the run ran was lost once the tree changed (a review).
    ``code.diff`` holds the tracked changes and the new package files, byte for byte (CRLF, Latin-1, binary,
    a non-ASCII name: each made the diff empty or unappliable, a red team), and applies at the commit."""
    (repo / "pkg" / "crlf.py").write_bytes(b"a = 1\r\nb = 2\r\n")
    (repo / "pkg" / "data.bin").write_bytes(bytes(range(256)))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "second")
    head = _git(repo, "rev-parse", "HEAD")
    run_dir = tmp_path_factory.mktemp("run")
    assert save_code_diff(run_dir, git_commit(repo / "pkg"), path=repo / "pkg") is None  # clean: nothing written
    assert list(run_dir.iterdir()) == []
    changed = {"clip.py": b"x = 2\n", "crlf.py": b"a = 1\r\nb = 3\r\n", "data.bin": bytes(range(255, -1, -1)),
               "latin.py": b"s = 'caf\xe9'\n", "\u65e5\u672c.py": "y = '\u65e5'\n".encode()}
    for name, data in changed.items():
        (repo / "pkg" / name).write_bytes(data)
    (repo / "notes.txt").write_text("not the package's\n")
    commit = git_commit(repo / "pkg")
    assert save_code_diff(run_dir, commit, path=repo / "pkg") == "code.diff"
    assert save_code_diff(run_dir, commit, attempt=2, path=repo / "pkg") == "code-attempt-2.diff"
    assert b"notes.txt" not in (run_dir / "code.diff").read_bytes() and capsys.readouterr().err == ""
    clone = tmp_path_factory.mktemp("clone")
    _apply_at(repo, head, run_dir / "code.diff", clone)
    for name, data in changed.items():
        assert (clone / "pkg" / name).read_bytes() == data, name


def test_a_large_new_file_is_named_not_copied_and_a_failed_write_only_warns(repo, tmp_path_factory, capsys,
                                                                           monkeypatch):
    """A new 165 MB data file under the package was read whole into the diff, which was then cut in the middle
    and applied nothing; a diff that could not be written left the run "running" with no error (a red team)."""
    from klear_lab import git_state, tracking

    head = _git(repo, "rev-parse", "HEAD")
    monkeypatch.setattr(git_state, "NEW_FILE_LIMIT", 1000)
    (repo / "pkg" / "big.jsonl").write_text("{}\n" * 1000)
    (repo / "pkg" / "clip.py").write_text("x = 3\n")
    run_dir = tmp_path_factory.mktemp("run")
    assert save_code_diff(run_dir, git_commit(repo / "pkg"), path=repo / "pkg") == "code.diff"
    assert "leaves out 1 new file(s) over 1000 bytes (pkg/big.jsonl)" in capsys.readouterr().err
    assert (run_dir / "code.diff").read_text().startswith("# left out (a new file over 1000 bytes): pkg/big.jsonl")
    clone = tmp_path_factory.mktemp("clone")
    _apply_at(repo, head, run_dir / "code.diff", clone)  # the header is not part of the patch
    assert (clone / "pkg" / "clip.py").read_text() == "x = 3\n" and not (clone / "pkg" / "big.jsonl").exists()

    def full_disk(path, write):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tracking, "atomic_write", full_disk)
    assert save_code_diff(run_dir, "abc+dirty", attempt=3, path=repo / "pkg") is None
    assert "could not be kept in code-attempt-3.diff" in capsys.readouterr().err
