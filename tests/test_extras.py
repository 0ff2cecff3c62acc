"""The core works without any extra; what needs one says which (guard/_extras.py).

These run in the full environment and in `make core-test` (core only). A missing extra is
made real in a fresh interpreter by ``sys.modules[name] = None`` for each of its modules,
which makes both ``import name`` and ``importlib.util.find_spec(name)`` fail as they do when
the package is not installed.
"""
from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

import pytest

from forewarn.errors import ForewarnError
from forewarn.guard._extras import EXTRAS, MissingExtra, missing, require

ROOT = Path(__file__).resolve().parents[1]
EVERY_EXTRA_MODULE = sorted({module for modules in EXTRAS.values() for module in modules})
CORE_COMMANDS = ["learn", "check", "states", "export", "demo", "replay", "evaluate", "ingest", "tune", "discover",
                 "init", "llmcheck"]


def without(modules: Sequence[str], code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter in which ``modules`` cannot be imported."""
    prelude = f"import sys\nfor _m in {modules!r}:\n    sys.modules[_m] = None\n"
    return subprocess.run([sys.executable, "-c", prelude + code], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "200"})


CLI = "import sys\nfrom forewarn.guard.cli import main\nsys.argv = ['forewarn', *{args!r}]\nmain()\n"


def test_help_of_forewarn_and_of_every_core_command_needs_no_extra(tmp_path: Path) -> None:
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom forewarn.guard.cli import app\n"
            f"for args in [['--help'], *[[c, '--help'] for c in {CORE_COMMANDS!r}]]:\n"
            "    result = CliRunner().invoke(app, args)\n"
            "    print(args[0], result.exit_code, 'Usage:' in result.output)\n"
            "print(sorted(m for m in sys.modules if m.partition('.')[0] in "
            f"{EVERY_EXTRA_MODULE!r} and sys.modules[m] is not None))\n")
    done = without(EVERY_EXTRA_MODULE, code, tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:-1] == [f"{name} 0 True" for name in ["--help", *CORE_COMMANDS]]
    assert lines[-1] == "[]"  # and nothing of an extra was imported on the way


def test_the_listing_names_serve_and_its_extra(tmp_path: Path) -> None:
    done = without(EXTRAS["server"], CLI.format(args=["--help"]), tmp_path)
    assert done.returncode == 0, done.stderr
    assert all(f"  {name} " in done.stdout for name in [*CORE_COMMANDS, "serve"])


@pytest.mark.parametrize("args", [["serve"], ["serve", "--port", "8000", "-m", "model.json"]])
def test_serve_without_the_server_extra_is_one_line_naming_it(tmp_path: Path, args: list[str]) -> None:
    done = without(EXTRAS["server"], CLI.format(args=args), tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "error: forewarn serve needs the server extra: pip install 'forewarn[server]'\n"


def test_serve_help_works_without_the_server_extra(tmp_path: Path) -> None:
    done = without(EXTRAS["server"], CLI.format(args=["serve", "--help"]), tmp_path)
    assert done.returncode == 0, done.stderr
    assert "--model" in done.stdout and "server extra" in " ".join(done.stdout.split())


def test_python_dash_m_server_without_the_extra_is_one_line(tmp_path: Path) -> None:
    blocked = tmp_path / "blocked"
    blocked.mkdir()  # a real `python -m`: the extra's modules made unimportable at start-up
    (blocked / "sitecustomize.py").write_text(f"import sys\nfor _m in {EXTRAS['server']!r}:\n    sys.modules[_m] = None\n")
    path = os.pathsep.join(p for p in [str(blocked), os.environ.get("PYTHONPATH", "")] if p)
    done = subprocess.run([sys.executable, "-m", "forewarn.server", "serve"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": path})
    assert done.returncode == 2, done.stderr
    assert done.stderr == "error: forewarn.server needs the server extra: pip install 'forewarn[server]'\n"


def test_the_langchain_integration_names_its_extra(tmp_path: Path) -> None:
    code = ("from forewarn.errors import ForewarnError\n"
            "from forewarn.guard.langchain import Transcript, ToolStep  # plain types: no LangChain needed\n"
            "try:\n"
            "    from forewarn.guard.langchain import ForewarnMiddleware\n"
            "except ImportError as exc:\n"
            "    print(isinstance(exc, ForewarnError), exc.name, exc)\n"
            "try:\n"
            "    import forewarn.guard.langchain.recorder\n"
            "except ImportError as exc:\n"
            "    print(exc)\n")
    done = without(EXTRAS["langchain"], code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "True langchain forewarn.guard.langchain.ForewarnMiddleware needs the langchain extra: "
        "pip install 'forewarn[langchain]'",
        "forewarn.guard.langchain.recorder needs the langchain extra: pip install 'forewarn[langchain]'"]


def test_the_client_names_its_extra(tmp_path: Path) -> None:
    done = without(["httpx"], "from forewarn.guard.client import Client", tmp_path)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == ("forewarn.guard._extras.MissingExtra: forewarn.guard.client needs the "
                                            "client extra: pip install 'forewarn[client]'")


def test_a_report_without_matplotlib_is_one_line_naming_the_extra(tmp_path: Path, toy_traces: Path,
                                                                  toy_model_path: Path) -> None:
    code = CLI.format(args=["replay", str(toy_traces), "--model", str(toy_model_path),
                            "--report", str(tmp_path / "r.html")])
    done = without(["matplotlib"], code, tmp_path)
    assert done.returncode == 2
    # refused before anything is replayed: the error is the only line (no table, no summary)
    assert done.stderr == ("error: drawing a report (--report, --plots) needs the report extra: "
                           "pip install 'forewarn[report]'\n") and done.stdout == ""
    assert not (tmp_path / "r.html").exists()


def test_the_sentiment_quantification_names_its_extra(tmp_path: Path) -> None:
    code = ("from forewarn.guard.llmcheck.quantify import make_quantification\n"
            "try:\n    make_quantification('sentiment')\nexcept ImportError as exc:\n    print(exc)\n")
    done = without(["vaderSentiment"], code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ("the sentiment quantification needs the llmcheck extra: "
                           "pip install 'forewarn[llmcheck]'\n")


def test_missing_extra_is_both_a_forewarn_error_and_an_import_error() -> None:
    assert missing("langchain", ("no_such_module_xyz", "sys")) == ["no_such_module_xyz"]
    with pytest.raises(MissingExtra) as caught:
        require("hf", "the thing", ("no_such_module_xyz",))
    assert isinstance(caught.value, ForewarnError) and isinstance(caught.value, ImportError)
    assert (str(caught.value), caught.value.extra, caught.value.name) == (
        "the thing needs the hf extra: pip install 'forewarn[hf]'", "hf", "no_such_module_xyz")
    require("hf", "the thing", ("sys",))  # present: nothing happens


def test_the_extras_table_is_pyprojects() -> None:
    optional = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"]
    assert set(optional) - {"all", "test", "dev"} == set(EXTRAS)
    assert optional["all"] == ["forewarn[langchain,server,client,report,llmcheck,postgres,parquet,mcp]"]
    assert optional["test"][0] == "forewarn[all,hf,spark,llm,dev]"


def _name(requirement: str) -> str:
    """The distribution a requirement names, normalized (PEP 503): "psycopg[binary]>=3.2" → "psycopg"."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0]).lower()


def test_every_third_party_module_the_package_imports_is_declared_by_the_core_or_an_extra() -> None:
    """A module that comes only as a dependency of a dependency may go (sniffio did, from anyio) or come
    with another extra only (issue 36): each one Forewarn imports is declared itself. Modules not installed
    here (the core run) are checked in the full run; `make extras-test` installs each extra alone."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = {_name(r) for r in project["dependencies"]}
    declared |= {_name(r) for extra, rs in project["optional-dependencies"].items()
                 if extra not in ("all", "test", "dev") for r in rs}
    imported: dict[str, set[str]] = {}
    sources = [p for folder in ("guard", "server", "domains", "monitors") for p in (ROOT / folder).rglob("*.py")]
    for path in [*sources, *(ROOT / "forewarn").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            for name in names:
                top = name.partition(".")[0]
                if top not in sys.stdlib_module_names and top not in ("forewarn", "__future__"):
                    imported.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    installed = importlib.metadata.packages_distributions()
    undeclared = {module: sorted(where)[:3] for module, where in imported.items()
                  if module in installed and not declared & {_name(d) for d in installed[module]}}
    assert not undeclared, f"imported, not declared in pyproject.toml (module: where): {undeclared}"
