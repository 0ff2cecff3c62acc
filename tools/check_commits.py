"""Check the subjects of the commits made since a recorded base (CONTRIBUTING.md).

A subject is at most 72 characters, and a merge's says what merged: git's and GitHub's
default subjects ("Merge branch 'x'", "Merge remote-tracking branch 'origin/x' into main",
"Merge pull request #12 from a/x") do not. Commits reachable from the base are history and
are not checked; the base is the commit the rule was recorded at, so the check gives the
same answer in any full clone, whichever branch is checked out (CI checks a fresh clone
of main, after its tests).

Run: ``python tools/check_commits.py [--base REV] [--head REV]`` in the repository
(``make check`` does). Exit status 0: every new commit passes; 1: some do not (each is
named, with what to change); 2: the base is not in this clone (a shallow clone: fetch the
history, ``git fetch --unshallow``).
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys

# main when the rule was recorded: its history keeps the subjects it was written with
BASE = "9f0df52dcb8c466469109271d1ada89a9b82fc61"
MAX_SUBJECT = 72
_FROM = r"( of \S+)?( into \S+)?"  # where it came from, where it went: still nothing of what it brings
DEFAULT_MERGE = re.compile(
    rf"Merge (remote-tracking )?branch '[^']*'{_FROM}"  # git merge, git pull
    rf"|Merge branches '[^']*'(, '[^']*')* and '[^']*'{_FROM}"
    rf"|Merge (commit|tag) '[^']*'{_FROM}"
    r"|Merge pull request #\d+ from \S+"  # GitHub's first line
)


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], capture_output=True, text=True, encoding="utf-8", check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip() or f"git {' '.join(args)} failed")
    return done.stdout


def problems(subject: str) -> list[str]:
    """What is wrong with one commit's subject (empty: nothing)."""
    found = []
    if len(subject) > MAX_SUBJECT:
        found.append(f"its subject has {len(subject)} characters, more than {MAX_SUBJECT}")
    if DEFAULT_MERGE.fullmatch(subject):
        found.append("its subject is git's default for a merge: say what the merge brings")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default=BASE, help="commits reachable from it are not checked (default: %(default)s)")
    parser.add_argument("--head", default="HEAD", help="the commit whose history is checked (default: HEAD)")
    args = parser.parse_args(argv)
    try:
        git("cat-file", "-e", f"{args.base}^{{commit}}")
    except RuntimeError:
        shallow = git("rev-parse", "--is-shallow-repository").strip() == "true"
        print(f"check_commits: the base {args.base} is not in this clone"
              + (" (a shallow one: run `git fetch --unshallow` first)" if shallow else ""), file=sys.stderr)
        return 2
    lines = git("log", "--format=%H %s", f"{args.base}..{args.head}").splitlines()  # a subject is one line
    failed = 0
    for line in lines:
        sha, _, subject = line.partition(" ")
        for problem in problems(subject):
            print(f"{sha[:12]} {subject!r}: {problem}")
            failed += 1
    checked = len(lines)
    if failed:
        print(f"check_commits: {failed} problem(s) in the {checked} commit(s) after {args.base[:12]} "
              "(CONTRIBUTING.md; rewrite them with `git rebase -i` before they reach main)")
        return 1
    print(f"check_commits: {checked} commit(s) after {args.base[:12]}, every subject fine")
    return 0


if __name__ == "__main__":
    sys.exit(main())
