"""``forewarn serve`` says, at start, where its sessions cross a threshold at their first step."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from _sidecar import settings
from _support import AB, NONE, TOY_SPEC, A, B, WriteRuns, toy_run
from forewarn.guard.pipeline import learn_model
from forewarn.guard.spec import parse_spec
from forewarn.server.state import start


def test_serve_warns_where_its_sessions_start_past_a_threshold(write_runs: WriteRuns, tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    runs = write_runs([toy_run("u", [NONE, A, AB]), toy_run("s1", [NONE, B, NONE]), toy_run("s2", [NONE, A, NONE]),
                       toy_run("s3", [NONE, B, B])], "start.jsonl")
    risky = learn_model([runs], parse_spec(TOY_SPEC + "  trigger: level\n")).save(tmp_path / "risky.json")
    calm = learn_model([runs], parse_spec(TOY_SPEC + "  trigger: increase\n")).save(tmp_path / "calm.json")
    unset = learn_model([runs], parse_spec(TOY_SPEC)).save(tmp_path / "unset.json")  # the sidecar's: increase
    with caplog.at_level(logging.WARNING, logger="forewarn.server"):
        state = start(settings(tmp_path / "db.sqlite", {"risky": risky, "calm": calm, "unset": unset}))
    state.close()
    warned = [r.getMessage() for r in caplog.records if r.name == "forewarn.server"]
    assert len(warned) == 1 and warned[0].startswith("model 'risky': reflect θ 0.9 > p_safe")
    assert "at the start: every first call will be reflected (set guard.trigger: increase" in warned[0]
