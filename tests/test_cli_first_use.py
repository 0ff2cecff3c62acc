"""Rough edges a new user hit on first use (issue 38, item 7): one clear line or a readable screen, never
a traceback, a doubled count or a row that reads like its neighbour."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from _support import CLI, TOY_SPEC, Result, WriteRuns, toy_state
from forewarn.guard import learn_model, load_spec

ROOT = Path(__file__).resolve().parents[1]


def user_error(result: Result, *fragments: str) -> None:
    assert result.returncode == 2, (result.args, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error: "), lines
    for fragment in fragments:
        assert fragment in lines[-1], (fragment, lines[-1])


def _twice(traces: Path, tmp_path: Path, how: str) -> list[Path]:
    if how == "same path":
        return [traces, traces]
    if how == "symlink":
        link = tmp_path / "link.jsonl"
        link.symlink_to(traces)
        return [traces, link]
    return [traces.parent / ".." / traces.parent.name / traces.name, traces]  # another spelling


@pytest.mark.parametrize("how", ["same path", "symlink", "another path"])
@pytest.mark.parametrize("command", ["learn", "evaluate", "tune", "replay", "discover", "ingest"])
def test_a_trace_file_given_twice_is_refused(forewarn_here: CLI, toy_traces: Path, toy_spec_path: Path,
                                             toy_model_path: Path, tmp_path: Path, command: str, how: str) -> None:
    paths = _twice(toy_traces, tmp_path, how)
    out = tmp_path / "out"
    options: dict[str, list[str | Path]] = {
        "learn": ["-s", toy_spec_path, "-o", out],
        "evaluate": ["-s", toy_spec_path],
        "tune": ["-s", toy_spec_path, "--target", "false-alarms=0.05", "-o", out],
        "replay": ["-m", toy_model_path],
        "discover": ["-s", toy_spec_path, "-o", out],
        "ingest": ["-o", out],
    }
    result = forewarn_here(command, *paths, *options[command])
    user_error(result, "the same trace file is given twice", "its runs would count twice")
    assert not out.exists()


# Run as the installed `forewarn` script runs: import the entry point, then call it. The finder makes
# Ctrl-C land in one import, as a plain KeyboardInterrupt or as what a compiled module's interrupted
# initialisation raises (`ImportError: initialization failed`, caused by the KeyboardInterrupt).
_INTERRUPT_AT = """
import importlib.abc, sys

target, how = sys.argv.pop(1), sys.argv.pop(1)


class CtrlC(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target_=None):
        if name != target:
            return None
        if how == "plain":
            raise KeyboardInterrupt
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise ImportError("initialization failed") from exc


sys.meta_path.insert(0, CtrlC())
sys.argv[0] = "forewarn"
from forewarn.guard.cli import main
sys.exit(main())
"""


@pytest.mark.parametrize("how", ["plain", "compiled"])
@pytest.mark.parametrize("module", [
    "stormpy",  # the core's commands, loaded with the CLI
    "forewarn.guard.cli.discover",  # the other commands, registered with the CLI
    "forewarn.guard.cli.llmcheck",  # a command module registered with the CLI (its package loads on use)
    "forewarn.guard.pipeline",  # a command's own lazy import
])
def test_ctrl_c_while_modules_load_exits_130_without_a_traceback(toy_traces: Path, toy_spec_path: Path,
                                                                 tmp_path: Path, module: str, how: str) -> None:
    out = tmp_path / "model.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-c", _INTERRUPT_AT, module, how, "learn", str(toy_traces),
                             "-s", str(toy_spec_path), "-o", str(out)],
                            capture_output=True, text=True, env=env, timeout=120, check=False)
    assert result.returncode == 130, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if line.strip()] == \
        ["error: interrupted; an output being written was discarded"]
    assert not out.exists()


def test_a_bare_forewarn_prints_its_help_readably(forewarn_here: CLI) -> None:
    result = forewarn_here()
    assert result.returncode == 2  # a missing command, as click has it
    assert "Traceback" not in result.stderr and "error:" not in result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == "Usage: forewarn [OPTIONS] COMMAND [ARGS]..."
    assert "Commands:" in lines
    listed = [line.split()[0] for line in lines[lines.index("Commands:") + 1:] if line.startswith("  ")]
    assert listed[:3] == ["learn", "check", "states"]
    assert forewarn_here("--help").stdout.strip() == result.stderr.strip()  # the same help as -h


def test_every_command_is_listed_in_a_whole_sentence(forewarn_here: CLI) -> None:
    lines = forewarn_here("--help").stdout.splitlines()
    listed = [line for line in lines[lines.index("Commands:") + 1:] if line.startswith("  ")]
    assert len(listed) >= 13
    assert [line for line in listed if not line.endswith(".") or line.endswith("...")] == []


def _forewarn(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The real command in its own process: what Storm writes on descriptor 2 is seen too."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "forewarn", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


@pytest.mark.parametrize("formula", ['P=? [F "nosuch"]', 'P>=0.5 [F "nosuch"]'])
def test_storm_own_error_log_stays_off_stderr(toy_model_path: Path, formula: str) -> None:
    result = _forewarn("check", toy_model_path, "--property", formula, "--format", "json")
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"error: Storm could not check {formula!r}: InvalidPropertyException: The property refers to unknown "
        "label 'nosuch'."]
    assert result.stdout == ""


def test_storm_output_is_passed_on_when_the_call_succeeds(capfd: pytest.CaptureFixture[str]) -> None:
    from forewarn.guard.storm import _storm_errors_dropped

    with _storm_errors_dropped():
        os.write(1, b"a warning on 1\n")
        os.write(2, b"a warning on 2\n")
    with pytest.raises(RuntimeError), _storm_errors_dropped():
        os.write(2, b"ERROR (x.cpp:1): said again by the exception\n")
        raise RuntimeError("said once")
    out, err = capfd.readouterr()
    assert (out, err) == ("a warning on 1\n", "a warning on 2\n")


def test_storm_own_error_log_stays_off_stderr_for_prism_files(tmp_path: Path) -> None:
    missing = tmp_path / "missing.pm"
    result = _forewarn("check", missing, "--property", 'P=? [F "done"]')
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"error: {missing}: PRISM model does not parse: FileIoException: Could "
                                          f"not open file {missing}."]


def test_the_version_is_the_changelogs_newest(forewarn_here: CLI) -> None:
    import re
    import tomllib

    from forewarn import __version__

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]  # one source
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "forewarn._version.__version__"}
    changelog = (ROOT / "docs" / "changelog.md").read_text(encoding="utf-8")
    newest = re.search(r"^- \*\*(\d+\.\d+)", changelog, re.MULTILINE)
    assert newest is not None
    assert __version__.startswith(newest[1] + "."), (__version__, newest[1])
    assert forewarn_here("--version").stdout == f"forewarn {__version__}\n"


_REMEMBERING_RUNS = [(["go", "pick", "go"], [0, 1, 3]), (["go", "open", "go"], [0, 1, 0]),
                     (["go", "pick", "wait"], [0, 1, 1]), (["go", "open", "go"], [0, 2, 0])]


@pytest.mark.parametrize("memory", ["{actions: 1}", "{actions: 2}", "{dwell: 3, previous: true}"])
def test_states_that_differ_only_in_memory_read_differently(write_runs: WriteRuns, tmp_path: Path,
                                                           forewarn_here: CLI, memory: str) -> None:
    from forewarn.guard.cli._model_text import state_words

    spec = tmp_path / "memory.yaml"
    spec.write_text(TOY_SPEC.replace("  delta: 0.05\n", f"  delta: 0.05\n  memory: {memory}\n"), encoding="utf-8")
    traces = write_runs([{"id": f"r{i}", "steps": [{"state": toy_state(b), "action": a} for a, b in zip(acts, bits)]}
                         for i, (acts, bits) in enumerate(_REMEMBERING_RUNS)])
    model = learn_model([traces], load_spec(spec))
    inner = [i for i, bits in enumerate(model.dtmc.states) if bits >= 0]
    predicates = [bits & 3 for bits in model.dtmc.states if bits >= 0]
    assert len(set(predicates)) < len(predicates)  # some states differ in what they remember only
    words = [state_words(model, i) for i in inner]
    assert len(set(words)) == len(words), words
    if "actions: 1" in memory:
        assert "a; last action: pick" in words and "a; last action: open" in words
    rows = json.loads(forewarn_here("check", model.save(tmp_path / "m.json"), "--format", "json").stdout)["states"]
    shown = [orjson.dumps([row["predicates"], row["memory"]]) for row in rows if row["kind"] == "state"]
    assert len(set(shown)) == len(shown)


_PROPERTIES = """
  properties:
    - name: no_a
      formula: 'F "a"'
      thresholds: {ask_human: 0.99}
    - name: no_unsafe
      formula: 'F "unsafe"'
      thresholds: {reflect: 0.8, stop: 0.3}
    - name: no_b
      formula: 'F<=2 "b"'
"""


def test_states_shows_each_guarded_property_with_its_thresholds(toy_traces: Path, tmp_path: Path,
                                                                 forewarn_here: CLI) -> None:
    spec = tmp_path / "properties.yaml"
    spec.write_text(TOY_SPEC + _PROPERTIES, encoding="utf-8")
    model = learn_model([toy_traces], load_spec(spec)).save(tmp_path / "m.json")
    shown = json.loads(forewarn_here("states", model, "--format", "json").stdout)
    assert [(p["name"], p["formula"], {k: v for k, v in p["thresholds"].items() if v is not None})
            for p in shown["properties"]] == [
        ("no_a", 'P=? [F "a"]', {"ask_human": 0.99}),
        ("no_unsafe", 'P=? [F "unsafe"]', {"reflect": 0.8, "stop": 0.3}),
        ("no_b", 'P=? [F<=2 "b"]', {"reflect": 0.9, "ask_human": 0.5, "stop": 0.2})]  # the guard's own
    for row in shown["states"]:
        assert set(row["properties"]) == {"no_a", "no_unsafe", "no_b"}
        assert row["p_unsafe"] == row["properties"][row["property"]]["p_unsafe"]
    table = forewarn_here("states", model).stdout
    flat = " ".join(table.split())
    assert "no_a: P=? [F \"a\"]; act when p_safe < θ: ask_human 0.99" in flat
    assert "no_unsafe: P=? [F \"unsafe\"]; act when p_safe < θ: stop 0.3, reflect 0.8" in flat
    assert "no_b: P=? [F<=2 \"b\"]; act when p_safe < θ: stop 0.2, ask_human 0.5, reflect 0.9" in flat
    assert "property" in table


def test_the_docs_say_what_make_demo_takes_time_on() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make demo    # creates .venv, installs Forewarn, runs `forewarn demo`" in readme  # the command kept
    assert "docs/quickstart.md#how-long-make-demo-takes" in readme
    quickstart = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    opening = quickstart[quickstart.index("## How long"):quickstart.index("## Your first model")]
    assert "~2 min" not in opening  # a figure without what it depends on
    said = " ".join(opening.split())
    for cause in ("**Installation**", "**Cores**", "**Load**", "one process on one core"):
        assert cause in said, cause
