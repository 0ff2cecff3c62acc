"""The CLI's rough edges (issues 12 and 14): each one line and exit 2, or a warning, never a traceback."""
from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from _support import CLI, TOY_SPEC, Result, install_package


def user_error(result: Result, *fragments: str) -> None:
    assert result.returncode == 2, (result.args, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error: "), lines
    for fragment in fragments:
        assert fragment in lines[-1], (fragment, lines[-1])


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--alpha", "-1", "--alpha: the smoothing α must lie in [0, 1e+06], got -1"),
    ("--alpha", "1e308", "--alpha: the smoothing α must lie in [0, 1e+06], got 1e+308"),
    ("--alpha", "nan", "--alpha: expected a finite number, got nan"),
    ("--period", "-1", "--period: expected a positive number of seconds, got -1"),
    ("--period", "0", "--period: expected a positive number of seconds, got 0"),
    ("--period", "1e-12", "resampling every 1e-12 s makes 3e+12 steps of this run (at most 1,000,000)"),
    ("--precision", "inf", "--precision: expected a finite number, got inf"),
    ("--precision", "-1", "--precision: expected a precision in [1e-15, 1), got -1"),
    ("--epsilon", "1e-320", "--epsilon: epsilon must be at least 1e-09, got 9.99989e-321"),
    ("--epsilon", "2", "--epsilon: epsilon must lie strictly between 0 and 1, got 2"),
    ("--delta", "0", "--delta: delta must lie strictly between 0 and 1, got 0"),
])
def test_learn_option_values_are_checked_first(forewarn_here: CLI, toy_traces: Path, toy_spec_path: Path,
                                               tmp_path: Path, option: str, value: str, message: str) -> None:
    out = tmp_path / "model.json"
    user_error(forewarn_here("learn", toy_traces, "-s", toy_spec_path, "-o", out, option, value), message)
    assert not out.exists()


def test_spec_learning_values_are_bounded_too(forewarn_here: CLI, toy_traces: Path, tmp_path: Path) -> None:
    spec = tmp_path / "huge.yaml"
    spec.write_text(TOY_SPEC.replace("alpha: 0.1", "alpha: 1e308"), encoding="utf-8")
    user_error(forewarn_here("learn", toy_traces, "-s", spec, "-o", tmp_path / "m.json"),
               "huge.yaml:9: learning.alpha: expected a number in [0, 1e6], got 1e+308")


@pytest.mark.parametrize(("theta", "message"), [("0.5,,0.7", "--theta: an empty threshold in '0.5,,0.7'"),
                                                 ("nan", "--theta: thresholds must lie in [0, 1]"),
                                                 ("0.1,x", "--theta: expected comma-separated numbers")])
def test_theta_lists(forewarn_here: CLI, toy_traces: Path, toy_model_path: Path, theta: str, message: str) -> None:
    user_error(forewarn_here("replay", toy_traces, "-m", toy_model_path, "--theta", theta), message)


@pytest.mark.report  # a --report/--plots case needs the report extra
def test_replay_warns_of_an_empty_file_and_checks_run_before_printing(forewarn_here: CLI, toy_traces: Path,
                                                                     toy_model_path: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    result = forewarn_here("replay", empty, toy_traces, "-m", toy_model_path)
    assert result.returncode == 0
    assert f"warning: {empty} holds no runs" in " ".join(result.stderr.split())
    alone = forewarn_here("replay", empty, "-m", toy_model_path)
    assert alone.returncode == 0 and "no runs to replay" in alone.stderr
    unknown = forewarn_here("replay", toy_traces, "-m", toy_model_path, "--run", "UNKNOWN", "--plots", tmp_path)
    user_error(unknown, "--run: no replayed run has the id 'UNKNOWN'")
    assert unknown.stdout == ""  # failed before printing any table


def test_a_spec_whose_unsafe_always_holds_is_warned_about(forewarn_here: CLI, toy_traces: Path,
                                                          tmp_path: Path) -> None:
    spec = tmp_path / "always.yaml"
    spec.write_text(TOY_SPEC.replace("unsafe: 'a && b'", "unsafe: 'a || !a'"), encoding="utf-8")
    result = forewarn_here("learn", toy_traces, "-s", spec, "-o", tmp_path / "m.json")
    assert result.returncode == 0
    assert "warning: 'unsafe' (a || !a) holds whatever the predicates are" in " ".join(result.stderr.split())


def test_a_transition_rule_that_raises_is_a_user_error(forewarn_here: CLI, toy_traces: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    install_package(tmp_path / "site", "fuzz-rules", {"fuzzrules": "def rule(src, dst):\n    raise KeyError('boom')\n"},
                    {"fuzz.rule": "fuzzrules:rule"})
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "fuzzrules", raising=False)
    spec = tmp_path / "rule.yaml"
    spec.write_text(TOY_SPEC + "valid_transitions:\n  function: fuzz.rule\n", encoding="utf-8")
    user_error(forewarn_here("learn", toy_traces, "-s", spec, "-o", tmp_path / "m.json"),
               "valid_transitions.function fuzz.rule raised KeyError: 'boom' (on [False, False] -> ")
    sys.modules.pop("fuzzrules", None)


def test_a_600_deep_field_is_one_line(forewarn_here: CLI, toy_spec_path: Path, tmp_path: Path) -> None:
    nested = "1"
    for _ in range(600):
        nested = '{"k": ' + nested + "}"
    traces = tmp_path / "deep.jsonl"
    traces.write_text('{"id": "d", "steps": [{"state": {"a": true, "b": ' + nested + "}}]}\n", encoding="utf-8")
    user_error(forewarn_here("learn", traces, "-s", toy_spec_path, "-o", tmp_path / "m.json"),
               "deep.jsonl:1: steps[0].state (run 'd'): the state is nested too deeply")


def test_model_files_get_the_same_mode_as_other_outputs(forewarn_here: CLI, toy_traces: Path, toy_spec_path: Path,
                                                        tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        assert forewarn_here("learn", toy_traces, "-s", toy_spec_path, "-o", tmp_path / "m.json").returncode == 0
        assert forewarn_here("ingest", toy_traces, "-o", tmp_path / "t.jsonl").returncode == 0
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "m.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "m.json").stat().st_mode) == stat.S_IMODE((tmp_path / "t.jsonl").stat().st_mode)


def test_usage_errors_are_one_line(forewarn_here: CLI, toy_traces: Path) -> None:
    user_error(forewarn_here("learn", toy_traces, "--alpha"), "Option '--alpha' requires an argument")
    user_error(forewarn_here("lern"), "No such command 'lern'")
    user_error(forewarn_here("learn", toy_traces, "-s", "x", "-o", "y", "--method", "fast"),
               "Invalid value for '--method': 'fast' is not one of")


def test_the_demos_hints_name_a_command_that_works_here(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from forewarn.domains.demo import _command

    venv = tmp_path / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "forewarn").write_text("#!/bin/sh\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [".venv/bin/forewarn", "demo"])
    monkeypatch.setenv("PATH", "/nonexistent")
    assert _command() == os.path.join(".venv", "bin", "forewarn")  # not on PATH: the path it was started by
    monkeypatch.setenv("PATH", str(venv))
    (venv / "forewarn").chmod(0o755)
    assert _command() == "forewarn"  # an activated environment
