"""Ingest never drops data silently: argument fields under their common names, an ingest that keeps no run
(or skips too many) fails with the reasons, a wrong --input-format says so, and runs from several files stay
apart."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from _eval_support import assert_user_error
from _support import CLI
from forewarn.guard.ingest import InputFormat, read_input
from forewarn.guard.toolcalls import Transcript


def agent_log(run_id: str | None, action: dict[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = {"input": "Put the mug away.", "output": "done",
                           "intermediate_steps": [{"action": action, "observation": {"success": True}}]}
    if run_id is not None:
        doc["id"] = run_id
    return doc


def write(path: Path, *docs: dict[str, Any]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in docs))
    return path


def args_seen(path: Path) -> list[Any]:
    seen: list[Any] = []

    def extractor(transcript: Transcript) -> dict[str, Any]:
        seen.extend(step.args for step in transcript.steps)
        return {"calls": len(transcript.steps)}

    list(read_input([path], InputFormat.langchain, extractor=extractor))
    return seen


@pytest.mark.parametrize("key", ["tool_input", "input", "args", "arguments"])
def test_arguments_are_read_under_every_common_name(tmp_path: Path, key: str) -> None:
    log = write(tmp_path / "log.jsonl", agent_log("r", {"tool": "move", key: {"object": "mug"}}))
    assert args_seen(log) == [{"object": "mug"}]


def test_agentspec_actions_keep_their_input(tmp_path: Path) -> None:
    # AgentSpec writes {"action": {"tool": "robotic controller", "input": "pick Egg"}}
    log = write(tmp_path / "log.jsonl", agent_log("r", {"tool": "robotic controller", "input": "pick Egg"}))
    assert args_seen(log) == ["pick Egg"]
    openai = write(tmp_path / "openai.jsonl", agent_log("r", {"tool": "send", "arguments": '{"to": "bob"}'}))
    assert args_seen(openai) == [{"to": "bob"}]


def test_arguments_under_an_unknown_name_are_reported(tmp_path: Path, forewarn_here: CLI) -> None:
    log = write(tmp_path / "log.jsonl", agent_log("r", {"tool": "move", "params": {"object": "mug"}}))
    result = forewarn_here("ingest", log, "-o", tmp_path / "out.jsonl")
    assert_user_error(result, "log.jsonl:1", "no arguments under tool_input, input, args, arguments; "
                                             "the action has params instead")
    assert not (tmp_path / "out.jsonl").exists()
    # a tool called without arguments is not an error
    bare = write(tmp_path / "bare.jsonl", agent_log("r", {"tool": "look", "log": "Thought: look"}))
    assert args_seen(bare) == [{}]


def test_an_ingest_that_keeps_nothing_fails_and_writes_nothing(tmp_path: Path, forewarn_here: CLI) -> None:
    log = write(tmp_path / "log.jsonl", agent_log("r", {"tool": "move", "params": {}}))
    out = tmp_path / "out.jsonl"
    result = forewarn_here("ingest", log, "-o", out, "--on-error", "skip")
    assert_user_error(result, "ingest found no run to write", "skipped 1: ", "nothing was written")
    assert not out.exists()
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert_user_error(forewarn_here("ingest", empty, "-o", out), "ingest found no run to write", "holds no runs")
    assert not out.exists()


def test_skipping_more_than_the_stated_share_fails(tmp_path: Path, forewarn_here: CLI) -> None:
    good = [agent_log(f"g{k}", {"tool": "move", "input": "mug"}) for k in range(3)]
    bad = [agent_log(f"b{k}", {"tool": "move", "params": {}}) for k in range(2)]
    log = write(tmp_path / "log.jsonl", *good, *bad)
    out = tmp_path / "out.jsonl"
    assert_user_error(forewarn_here("ingest", log, "-o", out, "--on-error", "skip", "--max-skipped", "0.3"),
                      "ingest skipped 2 of 5 runs, more than --max-skipped 0.3", "nothing was written")
    assert not out.exists()
    kept = forewarn_here("ingest", log, "-o", out, "--on-error", "skip")  # 2 of 5 is under the default half
    assert kept.returncode == 0, kept.stderr
    assert len(out.read_bytes().splitlines()) == 3 and "skipped 2" in kept.stderr


def test_otel_on_a_file_that_is_not_otel_is_an_error(tmp_path: Path, forewarn_here: CLI) -> None:
    traces = tmp_path / "runs.jsonl"
    traces.write_bytes(orjson.dumps({"id": "r", "steps": [{"state": {"a": True}}]}) + b"\n")
    assert_user_error(forewarn_here("ingest", traces, "--input-format", "otel", "-o", tmp_path / "o.jsonl"),
                      "runs.jsonl:1", "not an OpenTelemetry (OTLP JSON) export: no resourceSpans (its keys: id, "
                      "steps)")


def test_runs_from_several_files_get_distinct_ids_and_their_source(tmp_path: Path, forewarn_here: CLI) -> None:
    # single-document files without ids: every run would be `line-1`
    files = [write(tmp_path / f"{name}.json", agent_log(None, {"tool": "move", "input": name}))
             for name in ("a", "b", "c")]
    out = tmp_path / "out.jsonl"
    result = forewarn_here("ingest", *files, "-o", out)
    assert result.returncode == 0, result.stderr
    runs = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [r["id"] for r in runs] == ["line-1", "b.json:line-1", "c.json:line-1"]
    assert [r["meta"]["source"] for r in runs] == [str(f) for f in files]
    assert {r["meta"]["ingested_from"] for r in runs} == {"langchain"}  # the format is still said
    # one file alone is written as before
    alone = forewarn_here("ingest", files[0], "-o", tmp_path / "one.jsonl")
    assert alone.returncode == 0
    assert orjson.loads((tmp_path / "one.jsonl").read_bytes())["meta"]["source"] == "langchain"
