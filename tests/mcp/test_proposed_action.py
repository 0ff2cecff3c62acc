"""The proxy judges a proposed call with the call as the step's action (``action`` in CEL, action memory), as the
LangChain middleware and the sidecar's proposals do: a hazard that is the call itself is refused before it runs,
over the lean relay and the SDK path, in front of a real mcp-server-time."""
from __future__ import annotations

from typing import Any

import anyio
import orjson
import pytest
from _mcp_support import TIME_SERVER, connected, lean_connected, proxy_for, text_of
from mcp.shared.exceptions import MCPError

from forewarn.guard import Guard, GuardModel, learn_model
from forewarn.guard.mcp import SESSION_STOPPED, UpstreamSpec
from forewarn.guard.spec import parse_spec

pytestmark = pytest.mark.mcp

# converting a time is the hazard: a predicate over the action alone (the state is the extractor's, unread)
SPEC = """\
predicates:
  converting: 'action.tool == "convert_time"'
unsafe: converting
guard:
  thresholds: {reflect: 0.7, ask_human: 0.5, stop: 0.15}
learning: {alpha: 0.0, shrink: 'off', intervals: none}
"""
NOW: dict[str, Any] = {"tool": "get_current_time", "args": {"timezone": "UTC"}}
CONVERT: dict[str, Any] = {"tool": "convert_time",
                           "args": {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}}


@pytest.fixture(scope="module")
def action_model(tmp_path_factory: pytest.TempPathFactory) -> GuardModel:
    """Nine sessions ask the time twice; one converts a time after asking (p_unsafe at the start: 1/19)."""
    runs = [{"id": f"s{i}", "steps": [{"state": {}}, {"state": {}, "action": NOW}, {"state": {}, "action": NOW}]}
            for i in range(9)]
    runs.append({"id": "u", "steps": [{"state": {}}, {"state": {}, "action": NOW}, {"state": {}, "action": CONVERT}]})
    traces = tmp_path_factory.mktemp("action-traces") / "runs.jsonl"
    traces.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in runs))
    return learn_model([traces], parse_spec(SPEC))


async def _calls(client: Any) -> tuple[Any, MCPError]:
    asked = await client.call_tool(NOW["tool"], NOW["args"])
    with pytest.raises(MCPError) as refused:
        await client.call_tool(CONVERT["tool"], CONVERT["args"])
    return asked, refused.value


def _check(asked: Any, refused: MCPError) -> None:
    assert not asked.is_error and "UTC" in text_of(asked)
    # stopped before it ran: an error, not the converted time with words appended after the fact
    assert refused.error.code == SESSION_STOPPED
    assert "before the call to `convert_time`" in refused.error.message


def test_the_lean_relay_previews_a_call_with_its_own_action(action_model: GuardModel) -> None:
    async def scenario() -> tuple[Any, MCPError]:
        proxy = proxy_for(Guard(action_model), UpstreamSpec("time", command=TIME_SERVER))
        async with lean_connected(proxy) as (client, _):
            return await _calls(client)

    _check(*anyio.run(scenario))


def test_the_sdk_path_previews_a_call_with_its_own_action(action_model: GuardModel) -> None:
    async def scenario() -> tuple[Any, MCPError]:
        proxy = proxy_for(Guard(action_model), UpstreamSpec("time", command=TIME_SERVER))
        async with proxy.running() as server, connected(server) as client:
            return await _calls(client)

    _check(*anyio.run(scenario))


def test_a_preview_reads_the_proposed_call_as_the_steps_action(action_model: GuardModel) -> None:
    """The guard's own figures for the two proposals: the hazard is certain only for the call that is it."""
    from forewarn.guard.mcp.judge import judge
    from forewarn.guard.spec import Action

    proxy = proxy_for(Guard(action_model), UpstreamSpec("time", command=TIME_SERVER))
    guarded = proxy.open_session(None, "test")
    fine, _ = judge(guarded, NOW["tool"], NOW["args"], unknown_tools=Action.ASK_HUMAN, fallback=proxy._fallback)
    hazard, _ = judge(guarded, CONVERT["tool"], CONVERT["args"], unknown_tools=Action.ASK_HUMAN,
                      fallback=proxy._fallback)
    assert fine.action is Action.ALLOW and fine.decision.abstract_state == {"converting": False}
    assert hazard.action is Action.STOP and hazard.decision.abstract_state == {"converting": True}
    assert hazard.decision.p_unsafe == 1.0
