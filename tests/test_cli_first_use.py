"""Rough edges a new user hit on first use (issue 38, item 7): one clear line or a readable screen, never
a traceback, a doubled count or a row that reads like its neighbour."""
from __future__ import annotations

from pathlib import Path

import pytest

from _support import CLI, Result


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
