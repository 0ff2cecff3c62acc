"""A call whose arguments name one argument in two ways where case is ignored is refused before the upstream,
on every path: a server that matches names regardless of case (Go's ``encoding/json``) would run the call with
the variant's value, not the one Forewarn judged (CVE-2026-27896, for the arguments' own names)."""
from __future__ import annotations

from typing import Any

import anyio
import httpx
import mcp_types as types
import orjson
import pytest
from _mcp_support import flaky_upstream, http_hello, http_server, lean_raw, proxy_for, serving

from forewarn.guard import Guard, GuardModel
from forewarn.guard.mcp import UpstreamSpec
from forewarn.guard.mcp.calls import CallJudge, tool_name, unknown_tool

pytestmark = pytest.mark.mcp

# echo's input schema declares one argument, "text"
VARIANTS: list[dict[str, Any]] = [{"Text": "run"}, {"text": "judged", "TEXT": "run"}, {"teXt": "run", "note": 1}]


def call(rid: int, **args: Any) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                         "params": {"name": "echo", "arguments": args}}) + b"\n"


def refused(answer: dict[str, Any], rid: int, variant: str) -> bool:
    error = answer.get("error") or {}
    return (answer.get("id") == rid and error.get("code") == types.INVALID_PARAMS
            and f"names the argument \"{variant}\"" in error.get("message", "")
            and "where case is ignored" in error.get("message", ""))


def test_the_rule_refuses_a_declared_name_in_another_case_and_two_names_that_fold_alike() -> None:
    def problem(args: dict[str, Any], declared: frozenset[str] = frozenset({"path", "force"})) -> str | None:
        try:
            CallJudge.check_names("t", args, declared)
        except Exception as exc:
            return str(exc)
        return None

    assert problem({"path": "/a", "force": True}) is None
    assert problem({"path": "/a", "extra": 1, "other": 2}) is None  # (undeclared names of no variant pass)
    assert "\"Force\"" in (problem({"path": "/a", "Force": True}) or "")
    assert "\"PATH\", which reads as \"path\"" in (problem({"path": "/a", "PATH": "/b"}) or "")
    assert "\"Extra\", which reads as \"extra\"" in (problem({"extra": 1, "Extra": 2}) or "")  # no schema needed
    assert problem({"path": "/a", "Path": "/b"}, frozenset({"path", "Path"})) is None  # the schema declares both
    assert "\"ſubject\"" in (problem({"ſubject": "x"}, frozenset({"subject"})) or "")  # (ſ folds to s, as Go folds it)
    assert problem({"Anything": 1}, frozenset()) is None


def test_the_stdio_relay_refuses_case_variants_of_an_argument_on_either_of_its_paths(mcp_model: GuardModel) -> None:
    async def scenario() -> list[dict[str, Any]]:
        proxy = proxy_for(Guard(mcp_model), flaky_upstream(), unknown_tools="allow")
        answers = []
        async with lean_raw(proxy) as (reader, writer, _):
            # the first call lists the tools (a task of its own), the later ones take the fast path's judging
            for rid, args in enumerate([*VARIANTS, {"text": "fine"}], start=1):
                writer.write(call(rid, **args))
                with anyio.fail_after(30):
                    answers.append(orjson.loads(await reader.readline()))
        return answers

    answers = anyio.run(scenario)
    for rid, (answer, variant) in enumerate(zip(answers, ["Text", "TEXT", "teXt"]), start=1):
        assert refused(answer, rid, variant), answer
    assert answers[3]["result"]["content"][0]["text"] == "fine"


@pytest.mark.parametrize("relay", ["lean", "sdk"])
def test_over_http_either_relay_refuses_case_variants_of_an_argument(mcp_model: GuardModel, relay: str) -> None:
    async def scenario() -> list[dict[str, Any]]:
        with http_server("flaky-http") as upstream:
            proxy = proxy_for(Guard(mcp_model), UpstreamSpec("flaky", url=upstream), unknown_tools="allow")
            async with serving(proxy, relay) as url, httpx.AsyncClient(timeout=60) as raw:
                theirs = await http_hello(raw, url)
                answers = []
                for rid, args in enumerate([*VARIANTS, {"text": "fine"}], start=1):
                    got = await raw.post(url, headers=theirs, content=call(rid, **args))
                    body = got.text if "json" in got.headers["content-type"] else got.text.split("data: ", 1)[1]
                    answers.append(orjson.loads(body))
        return answers

    answers = anyio.run(scenario)
    for rid, (answer, variant) in enumerate(zip(answers, ["Text", "TEXT", "teXt"]), start=1):
        assert refused(answer, rid, variant), answer
    assert answers[3]["result"]["content"][0]["text"] == "fine"


def test_a_long_tool_name_is_quoted_in_part() -> None:
    """An error quotes the client's own tool name back whole up to 100 characters, then in part."""
    long = "x" * 5000
    assert unknown_tool("no_such_tool").error.message == "Unknown tool: no_such_tool (no upstream of this proxy lists it)"
    said = unknown_tool(long).error.message
    assert len(said) < 250 and "(the first 100 of 5000 characters)" in said
    assert tool_name("echo") == "'echo'" and len(tool_name(long)) < 160
