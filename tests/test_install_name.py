"""One installed name, `forewarn`; the pre-0.2 names are aliases of the same modules."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import forewarn
import forewarn.guard

ROOT = Path(__file__).resolve().parents[1]


def run(code: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_everyday_names_are_reexported() -> None:
    assert forewarn.Guard is forewarn.guard.Guard
    assert forewarn.ForewarnError is forewarn.guard.ForewarnError
    assert set(forewarn.__all__) <= set(dir(forewarn))


def test_import_forewarn_is_cheap(tmp_path: Path) -> None:
    loaded = run("import sys, forewarn; print(sorted(m for m in sys.modules if m.startswith(('forewarn', 'stormpy', 'scipy'))))",
                 tmp_path)
    assert loaded == str(sorted(["forewarn", "forewarn._aliases", "forewarn._version"])), loaded


def test_old_names_are_the_same_modules_outside_the_checkout(tmp_path: Path) -> None:
    # in `make core-test` this runs against the non-editable install: forewarn-aliases.pth at work
    out = run("import guard, guard.spec, forewarn.guard.spec as new, monitors, domains.tools\n"
              "import forewarn.monitors, forewarn.domains.tools\n"
              "from guard import Guard; from forewarn import Guard as G\n"
              "print(guard.spec is new, Guard is G, monitors is forewarn.monitors,\n"
              "      domains.tools is forewarn.domains.tools, new.__spec__.name, guard.__name__)", tmp_path)
    assert out == "True True True True forewarn.guard.spec forewarn.guard"


@pytest.mark.server
def test_the_old_server_name_is_the_same_module_outside_the_checkout(tmp_path: Path) -> None:
    out = run("import server, forewarn.server; print(server is forewarn.server)", tmp_path)
    assert out == "True"


def test_old_names_in_the_source_checkout_are_not_loaded_twice() -> None:
    out = run("import guard.runtime, forewarn.guard.runtime as r, sys\n"
              "print(guard.runtime is r, 'guard' in sys.modules and sys.modules['guard'] is sys.modules['forewarn.guard'])",
              ROOT)
    assert out == "True True"


def test_an_applications_own_guard_package_wins(tmp_path: Path) -> None:
    (tmp_path / "guard").mkdir()
    (tmp_path / "guard" / "__init__.py").write_text("MINE = True\n")
    (tmp_path / "guard" / "spec.py").write_text("ALSO_MINE = True\n")
    out = run("import forewarn.guard, guard, guard.spec\n"
              "print(guard.MINE, guard.spec.ALSO_MINE, guard is not forewarn.guard)", tmp_path)
    assert out == "True True True"


def test_python_dash_m_runs_the_cli_under_both_names(tmp_path: Path) -> None:
    for module in ("forewarn", "guard.cli"):
        done = subprocess.run([sys.executable, "-m", module, "--version"], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0 and done.stdout.startswith("forewarn "), (module, done.stderr)
