"""tools/check_commits.py on throw-away repositories: the subjects after the base are checked, those
before it are history."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "check_commits.py"
LONG = "Describe in one very long line everything this commit did, and why, and how"  # 75 characters


@pytest.fixture
def env() -> dict[str, str]:
    """git with neither the machine's nor the user's configuration (no signing, no hooks), a fixed author."""
    return {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}


def git(repo: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def commit(repo: Path, env: dict[str, str], subject: str) -> str:
    git(repo, env, "commit", "--allow-empty", "-q", "-m", subject, "-m", "Why: a test.")
    return git(repo, env, "rev-parse", "HEAD")


def check(repo: Path, env: dict[str, str], base: str) -> tuple[int, str]:
    done = subprocess.run([sys.executable, str(SCRIPT), "--base", base], cwd=repo, env=env,
                          capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr


@pytest.fixture
def repo(tmp_path: Path, env: dict[str, str]) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, env, "init", "-q", "-b", "main")
    return repo


def test_only_the_commits_after_the_base_are_checked(repo: Path, env: dict[str, str]) -> None:
    commit(repo, env, LONG)  # history: kept as it was written
    base = commit(repo, env, "Record the rule")
    assert check(repo, env, base) == (0, "check_commits: 0 commit(s) after " + base[:12] + ", every subject fine\n")
    commit(repo, env, "x" * 72)
    assert check(repo, env, base)[0] == 0
    bad = commit(repo, env, LONG)
    status, out = check(repo, env, base)
    assert status == 1
    assert f"{bad[:12]} {LONG!r}: its subject has 75 characters, more than 72" in out
    assert "1 problem(s) in the 2 commit(s)" in out


def test_a_merge_says_what_it_merged(repo: Path, env: dict[str, str]) -> None:
    base = commit(repo, env, "Start")
    for subject, status in [("Merge branch 'topic'", 1), ("Merge branch 'topic' into main", 1),
                            ("Merge pull request #7 from someone/topic", 1),
                            ("Merge topic: the guard says why it stopped", 0)]:
        git(repo, env, "checkout", "-q", "-B", "topic", base)
        commit(repo, env, "Say why the guard stopped")
        git(repo, env, "checkout", "-q", "main")
        git(repo, env, "reset", "-q", "--hard", base)
        git(repo, env, "merge", "-q", "--no-ff", "-m", subject, "topic")
        result, out = check(repo, env, base)
        assert result == status, (subject, out)
        if status:
            assert f"{subject!r}: its subject is git's default for a merge" in out


def test_a_base_missing_from_the_clone_is_an_error_not_a_pass(repo: Path, env: dict[str, str], tmp_path: Path) -> None:
    base = commit(repo, env, "Start")
    commit(repo, env, "Then")
    commit(repo, env, LONG)
    shallow = tmp_path / "shallow"
    git(tmp_path, env, "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow))
    status, out = check(shallow, env, base)
    assert status == 2 and "not in this clone (a shallow one: run `git fetch --unshallow` first)" in out
    git(shallow, env, "fetch", "-q", "--unshallow")
    status, out = check(shallow, env, base)
    assert status == 1 and "1 problem(s) in the 2 commit(s)" in out
