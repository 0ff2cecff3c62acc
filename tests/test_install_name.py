"""One installed name, `forewarn`, and nothing that runs at interpreter start: the 0.1 names
(`import guard`, `import server`, …) are gone."""
from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import forewarn
import forewarn.guard


def run(code: str, cwd: Path) -> str:
    # as an installed package is used: no checkout on the path (a PYTHONPATH of it would put guard/ there)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_everyday_names_are_reexported() -> None:
    assert forewarn.Guard is forewarn.guard.Guard
    assert forewarn.ForewarnError is forewarn.guard.ForewarnError
    assert set(forewarn.__all__) <= set(dir(forewarn))


def test_import_forewarn_is_cheap(tmp_path: Path) -> None:
    loaded = run("import sys, forewarn; print(sorted(m for m in sys.modules if m.startswith(('forewarn', 'stormpy', 'scipy'))))",
                 tmp_path)
    assert loaded == str(sorted(["forewarn", "forewarn._version"])), loaded


def test_nothing_of_forewarn_is_loaded_at_interpreter_start(tmp_path: Path) -> None:
    out = run("import sys; print(sorted(m for m in sys.modules if m.startswith('forewarn')))", tmp_path)
    assert out == "[]"


def test_the_old_bare_names_are_gone_outside_the_checkout(tmp_path: Path) -> None:
    out = run("import importlib.util\n"
              "print([importlib.util.find_spec(n) is None for n in ('guard', 'server', 'monitors', 'domains')])",
              tmp_path)
    assert out == "[True, True, True, True]"


def test_the_distribution_installs_one_top_level_name_and_no_pth() -> None:
    # the installed distribution's RECORD (a source checkout's forewarn.egg-info has none)
    installed = [d for d in metadata.distributions(name="forewarn") if d.read_text("RECORD") is not None]
    assert installed
    files = [str(f) for f in installed[0].files or []]
    assert not [f for f in files if f.endswith(".pth") and "forewarn" in f.lower() and "__editable__" not in f], files
    top = {f.split("/")[0] for f in files if f.endswith(".py") and "/" in f and ".dist-info" not in f.split("/")[0]}
    assert top <= {"forewarn"}, top


def test_python_dash_m_runs_the_cli(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "forewarn", "--version"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("forewarn "), done.stderr
