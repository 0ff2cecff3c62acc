"""Progress of long commands off a terminal: a line on stderr every FOREWARN_PROGRESS_SECONDS, with the stage,
done/total, the time elapsed and an estimate; stdout stays clean (``--format json`` still parses)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from _support import CLI
from forewarn.guard.cli._progress import progress

# stage: done/total unit, elapsed, estimate
COUNTED = re.compile(r"^(?P<stage>.+): (?P<done>\d+)/(?P<total>\d+) \w+, \d+ s elapsed, "
                     r"(about \d+ s left|no estimate yet|finishing)$")


def progress_lines(stderr: str) -> list[re.Match[str]]:
    return [m for m in map(COUNTED.match, stderr.splitlines()) if m is not None]


def test_a_line_every_period_with_stage_count_elapsed_and_estimate(capsys: pytest.CaptureFixture[str]) -> None:
    with progress("cross-validation", total=4, period=0.02) as update:
        update(completed=1, description="fold 1/2: replay")
        time.sleep(0.15)
    shown = progress_lines(capsys.readouterr().err)
    assert len(shown) >= 3
    assert shown[0]["stage"] == "cross-validation: fold 1/2: replay"
    assert (shown[0]["done"], shown[0]["total"]) == ("1", "4")
    assert shown[-1][0].endswith("s left")  # a quarter done: the rest extrapolated


def test_nothing_within_the_first_period_and_no_estimate_without_a_total(
        capsys: pytest.CaptureFixture[str]) -> None:
    with progress("learning", unit="runs", period=5.0) as update:
        update(completed=3)
    assert capsys.readouterr().err == ""
    with progress("learning", unit="runs", period=0.02) as update:
        update(completed=3)
        time.sleep(0.1)
    assert "learning: 3 runs so far, 0 s elapsed, no estimate (total not known)" in capsys.readouterr().err
    with progress("discovering", period=0.02) as update:
        update(description="reading the fields of 12 steps", completed=0, total=None)
        time.sleep(0.1)
    assert "discovering: reading the fields of 12 steps: 0 s elapsed, no estimate (total not known)" in (
        capsys.readouterr().err)


def test_evaluate_and_learn_off_a_terminal(toy_traces: Path, toy_spec_path: Path, tmp_path: Path,
                                           forewarn_here: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOREWARN_PROGRESS_SECONDS", "0.005")
    result = forewarn_here("evaluate", toy_traces, "--spec", toy_spec_path, "--folds", "2", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert isinstance(result.json(), dict)
    assert any(m["stage"].startswith("cross-validation: fold ") and m["total"] == "4"
               for m in progress_lines(result.stderr)), result.stderr
    learned = forewarn_here("learn", toy_traces, "--spec", toy_spec_path, "-o", tmp_path / "m.json",
                            "--format", "json")
    assert learned.returncode == 0, learned.stderr
    assert isinstance(learned.json(), dict)
    assert re.search(r"^learning: \d+ runs so far, \d+ s elapsed", learned.stderr, re.M), learned.stderr


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan"])
def test_a_bad_period_is_one_line_and_exit_2(value: str, toy_traces: Path, toy_spec_path: Path,
                                             forewarn_here: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOREWARN_PROGRESS_SECONDS", value)
    result = forewarn_here("evaluate", toy_traces, "--spec", toy_spec_path, "--folds", "2")
    assert result.returncode == 2
    assert "FOREWARN_PROGRESS_SECONDS" in result.stderr and "Traceback" not in result.stderr


def test_a_real_pipe_gets_lines_and_clean_json(toy_traces: Path, toy_spec_path: Path) -> None:
    """In a fresh process whose stderr is a pipe (a CI log), as a user runs it."""
    env = {**os.environ, "FOREWARN_PROGRESS_SECONDS": "0.005", "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("FORCE_COLOR", None)  # rich takes it for a terminal
    done = subprocess.run([sys.executable, "-m", "forewarn", "evaluate", str(toy_traces), "--spec",
                           str(toy_spec_path), "--folds", "2", "--format", "json"], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert isinstance(orjson.loads(done.stdout), dict)
    assert any(m["stage"].startswith("cross-validation") for m in progress_lines(done.stderr)), done.stderr
