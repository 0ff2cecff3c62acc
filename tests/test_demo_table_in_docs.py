"""The demo's table as the README and docs/demo.md show it: the same table in both, with a row for every
configuration `forewarn demo` runs (none, stop and reflect at their θ, the shield) in its order."""
from __future__ import annotations

from pathlib import Path

from forewarn.domains.demo import REFLECT_THETAS, SHIELD_THETA, STOP_THETAS

ROOT = Path(__file__).resolve().parents[1]


def _table(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("┏") and "enforcement" in lines[k + 1])
    end = next(k for k in range(start, len(lines)) if lines[k].startswith("└"))
    return lines[start:end + 1]


def test_the_readme_and_demo_md_show_the_same_table_with_every_row() -> None:
    readme, demo = _table(ROOT / "README.md"), _table(ROOT / "docs" / "demo.md")
    assert readme == demo
    rows = [[cell.strip() for cell in line.strip("│").split("│")] for line in readme if line.startswith("│")]
    expected = [("none", "–")] + [("stop", f"{t:g}") for t in STOP_THETAS] \
        + [("reflect", f"{t:g}") for t in REFLECT_THETAS] + [("shield", f"{SHIELD_THETA:g}")]
    assert [(row[0], row[1]) for row in rows] == expected
    for row in rows:  # unsafe, completed and stopped are percentages, interventions per episode non-negative
        assert all(0.0 <= float(cell) <= 100.0 for cell in row[2:5]) and float(row[5]) >= 0.0
