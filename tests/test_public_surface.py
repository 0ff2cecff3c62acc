"""The public surface is what the docs name (CONTRIBUTING.md, "The public surface"): ``__all__`` only in the
modules the documentation names and in packages' ``__init__.py``; every other module has none, or lists only
the names it passes on. ``tools/surface.py`` states the rule and rewrites the modules that break it."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_no_module_outside_the_documented_surface_has_an_all() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "surface.py")], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, f"run `python tools/surface.py --apply`:\n{done.stdout}{done.stderr}"
    assert "modules breaking the rule: 0" in done.stdout


def test_the_everyday_names_and_the_documented_modules_keep_theirs() -> None:
    import forewarn
    import forewarn.errors

    assert {"Guard", "Session", "Decision", "learn_model", "load_guard"} <= set(forewarn.__all__)
    assert "ForewarnError" in forewarn.errors.__all__
    # the integrations' (read from the source: their extras may not be installed here)
    for folder, name in (("client", "Client"), ("langchain", "ForewarnMiddleware")):
        tree = ast.parse((ROOT / "guard" / folder / "__init__.py").read_text(encoding="utf-8"))
        listed = next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                      and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets))
        assert name in listed
