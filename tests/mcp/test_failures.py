"""Bad input and failing upstreams: each one clear error, and the proxy keeps serving other sessions."""
from __future__ import annotations

from typing import Any

import anyio
import pytest
from _mcp_support import assert_failures_reported, connected, flaky_upstream, proxy_for, text_of
from mcp.shared.exceptions import MCPError

from forewarn.guard import Guard, GuardModel

pytestmark = pytest.mark.mcp


def test_an_upstream_that_never_answers_times_out_and_a_crash_is_reported_and_restarted(
        mcp_model: GuardModel) -> None:
    async def scenario() -> dict[str, Any]:
        proxy = proxy_for(Guard(mcp_model), flaky_upstream(), call_timeout=2.0, unknown_tools="allow",
                          max_argument_bytes=1000)
        seen: dict[str, Any] = {}
        async with proxy.running() as server, connected(server) as one, connected(server) as other:
            with pytest.raises(MCPError) as hung:
                await one.call_tool("hang", {})
            seen["hung"] = hung.value.error
            seen["other"] = text_of(await other.call_tool("echo", {"text": "still here"}))
            with pytest.raises(MCPError) as big:
                await other.call_tool("echo", {"text": "x" * 5000})
            seen["big"] = big.value.error
            with pytest.raises(MCPError) as crashed:
                await one.call_tool("crash", {})
            seen["crashed"] = crashed.value.error
            # restarted: the next call is served by a new process
            seen["after"] = text_of(await other.call_tool("echo", {"text": "back"}))
            seen["connections"] = proxy.upstreams[0].connections
        return seen

    seen = anyio.run(scenario)
    assert_failures_reported(seen)
    assert seen["after"] == "back" and seen["connections"] == 2
