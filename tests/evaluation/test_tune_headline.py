"""``forewarn tune`` says only what happened (issue 38): warned ahead apart from blocked at the step, and how
many members of a bundle got thresholds of their own."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from _support import AB, CLI, NONE, TOY_SPEC, toy_run


def sudden_runs(n: int, seed: int) -> list[dict[str, Any]]:
    """Runs that sit in the calm state and, in about half of them, violate at a random step with nothing before
    it to tell: only a look at the next step (look-ahead) can catch the violation, on its own step."""
    rng = random.Random(seed)
    runs = []
    for k in range(n):
        length = rng.randrange(3, 9)
        bits = [NONE] * length + ([AB] if rng.random() < 0.5 else [NONE])
        line = toy_run(f"s{k}", bits)
        line["meta"] = {"task": f"t{k % 60}"}
        runs.append(line)
    return runs


@pytest.fixture
def sudden(tmp_path: Path) -> tuple[Path, Path]:
    traces = tmp_path / "runs.jsonl"
    traces.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in sudden_runs(120, 3)))
    spec = tmp_path / "toy.yaml"
    spec.write_text(TOY_SPEC)
    return traces, spec


def test_a_detection_only_blocked_at_the_step_is_not_called_warned(sudden: tuple[Path, Path],
                                                                   forewarn_here: CLI) -> None:
    traces, spec = sudden
    result = forewarn_here("tune", traces, "-s", spec, "--target", "false-alarms=0.1", "--method", "topological")
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stdout.split())
    unsafe = sum(1 for r in sudden_runs(120, 3) if r["steps"][-1]["state"]["a"])
    assert (f"reflect at θ 1: warned ahead 0 of {unsafe} violating runs (0.0%) before the violating step, "
            f"blocked at the step {unsafe} (100.0%); false alarms 0 of {120 - unsafe} safe runs (0.0%)") in said
    assert "note: reflect: every detection is a block at the violating step itself (lookahead enforcement" in said
    as_json = forewarn_here("tune", traces, "-s", spec, "--target", "false-alarms=0.1", "--method", "topological",
                            "--format", "json")
    report = as_json.json()
    assert isinstance(report, dict)
    reflect = report["actions"][0]["figures"]
    assert reflect["warned_ahead_rate"] == 0.0 and reflect["blocked_at_step_rate"] == 1.0
    assert any(n.startswith("reflect: every detection is a block") for n in report["notes"])


def test_observed_runs_are_not_blocked_and_say_nothing_of_it(sudden: tuple[Path, Path], forewarn_here: CLI) -> None:
    traces, spec = sudden
    result = forewarn_here("tune", traces, "-s", spec, "--target", "false-alarms=0.1", "--method", "topological",
                           "--enforcement", "observe")
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stdout.split())
    assert "blocked at the step 0 (0.0%)" in said and "every detection is a block" not in said


def test_the_count_of_members_with_thresholds_of_their_own(sudden: tuple[Path, Path], forewarn_here: CLI) -> None:
    traces, spec = sudden
    common = ("-s", spec, "--target", "false-alarms=0.1", "--method", "topological", "--bundle-by", "meta.task",
              "--enforcement", "observe", "--trigger", "level", "--folds", "3")
    none = forewarn_here("tune", traces, *common, "--format", "json")
    report = none.json()
    assert none.returncode == 0 and isinstance(report, dict)
    # two runs per task: no member has enough runs for a model (and thresholds) of its own
    assert report["members_with_own_thresholds"] == 0
    assert all(m["pooled"] for m in report["members"] or [])
    table = forewarn_here("tune", traces, *common)
    said = " ".join(table.stdout.split())
    assert "each member decides under its own thresholds" not in said
    assert "no held-out run was replayed by a member of its own group; every member keeps the pooled thresholds" \
        in said
    assert "60 group(s) never had their runs replayed by a model of their own" in said
