"""The documentation's runnable examples run as written, and the README stays a front page.

A fenced code block right after a ``<!-- runnable -->`` line is run: the blocks of one page in
order, in one empty folder, Python with this interpreter (warnings as errors) and shell with
bash (``-euo pipefail``), with this interpreter's ``forewarn`` first on the PATH. A page's
examples thus stay true as the code changes; ``make docs`` checks the links (mkdocs, strict).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_RUNNABLE = re.compile(r"^<!-- runnable -->\n```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)
PAGES = sorted(path for path in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
               if "<!-- runnable -->" in path.read_text(encoding="utf-8"))


def runnable_blocks(text: str) -> list[tuple[str, str]]:
    return [(language, code) for language, code in _RUNNABLE.findall(text)]


def test_some_page_has_runnable_examples() -> None:
    assert ROOT / "docs" / "quickstart.md" in PAGES
    assert len(runnable_blocks((ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8"))) >= 4


@pytest.mark.parametrize("page", PAGES, ids=lambda path: str(path.relative_to(ROOT)))
def test_runnable_examples_run(page: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    for number, (language, code) in enumerate(runnable_blocks(page.read_text(encoding="utf-8")), start=1):
        if language == "python":
            command = [sys.executable, "-W", "error", "-c", code]
        elif language in ("bash", "sh", "shell"):
            command = ["bash", "-euo", "pipefail", "-c", code]
        else:
            raise AssertionError(f"{page.name}: runnable block {number} is {language!r}, neither python nor bash")
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{page.name}, runnable block {number}:\n{done.stdout}\n{done.stderr}"


def test_the_readme_is_a_front_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150
    opening = readme[:readme.index("## What the demo shows")]
    assert "make demo    # creates .venv" in opening and "make test    # creates .venv" in opening
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).is_file(), link


def _anchors(path: Path) -> set[str]:
    """The anchors MkDocs gives a page's headings (Python-Markdown's slugify, without its unicode step)."""
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", path.read_text(encoding="utf-8"), re.MULTILINE):
        text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
        found.add(re.sub(r"[-\s]+", "-", text))
    return found


def test_the_pages_forewarn_help_points_to_exist() -> None:
    """`forewarn COMMAND -h` ends with the page (and section) that explains the command."""
    from forewarn.guard.cli import _GUIDE

    for command, (_, _, where) in _GUIDE.items():
        page, _, anchor = where.partition("#")
        assert (ROOT / page).is_file(), (command, where)
        assert not anchor or anchor in _anchors(ROOT / page), (command, where)
