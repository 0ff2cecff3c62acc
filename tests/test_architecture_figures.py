"""docs/architecture.md's static figures stay current: its "now" column of "The structure, measured" within
5 % of what ``bench/structure.py`` counts in this checkout (package lines, ``.py`` files, the median file).

The flows' files crossed need the extras and a running sidecar: ``python bench/structure.py`` measures those,
and the page names the commit they were measured at."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from structure import median_module, module_lengths, package_lines

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 0.05


def _now(label: str) -> float:
    """The last cell of the table row whose first cell starts with ``label``, as a number."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = page.split("## The structure, measured", 1)[1].split("\n## ", 1)[0]
    row = next(line for line in section.splitlines() if line.startswith(f"| {label}"))
    cell = row.strip().strip("|").split("|")[-1]
    number = re.search(r"[\d,]+(?:\.\d+)?", cell)
    assert number is not None, row
    return float(number.group().replace(",", ""))


@pytest.mark.parametrize(("label", "measure"), [
    ("package lines", lambda: package_lines(ROOT)),
    ("package `.py` files", lambda: len(module_lengths(ROOT))),
    ("median `.py` file", lambda: median_module(ROOT)),
])
def test_the_page_gives_the_checkouts_own_figures(label: str, measure: object) -> None:
    assert callable(measure)
    shown, counted = _now(label), float(measure())
    assert abs(shown - counted) <= TOLERANCE * counted, (
        f"docs/architecture.md says {label} {shown:,.0f}, the checkout has {counted:,.0f}: "
        "run python bench/structure.py and update the page")
