"""Tool descriptions judged, tool lists pinned and secrets redacted (issue 43 items 1 and 2), against a real
poisoned server on the official SDK (``_gateway_server.py``), driven by the SDK's client, over stdio (the lean
relay), over streamable HTTP (the lean HTTP relay, in front of the server's own HTTP) and through the SDK path."""
from __future__ import annotations

import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from _gateway_server import AWS_KEY, JWT, gateway_over_http
from _mcp_support import Approver, connected, http_client, lean_connected, serving, text_of
from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from forewarn.domains.mcp import PROXY_CONFIG
from forewarn.guard import Guard, GuardModel
from forewarn.guard.mcp import GuardedProxy, UpstreamSpec, load_config
from forewarn.guard.mcp.audit import AuditStore
from forewarn.guard.mcp.gate import TOOLS_REFUSED

SERVER = Path(__file__).with_name("_gateway_server.py")
KINDS = {"vault": "read_file", "lookup": "other", "notes": "other"}  # clock and touch: no kind
TRANSPORTS = ("stdio", "http", "sdk")


def gateway_proxy(model: GuardModel, upstream: UpstreamSpec, audit: Path, **settings: Any) -> GuardedProxy:
    record = settings.pop("record", None)
    config = load_config(PROXY_CONFIG, upstreams=[upstream], tool_kinds=KINDS, argument_aliases={}, **settings)
    store = AuditStore(audit, model_name="mcp", model_version="test")
    return GuardedProxy(Guard(model), config, audit=store, record=record)


@asynccontextmanager
async def client_of(transport: str, model: GuardModel, change: Path, audit: Path, *,
                    elicitation_callback: Any = None, **settings: Any) -> AsyncIterator[ClientSession]:
    """A client of a proxy in front of the poisoned server, by ``transport``; the audit store closed after."""
    hooks = {"elicitation_callback": elicitation_callback} if elicitation_callback is not None else {}
    stdio = UpstreamSpec("poisoned", command=sys.executable, args=(str(SERVER), "stdio", str(change)))
    if transport == "http":
        with gateway_over_http(change) as url:
            proxy = gateway_proxy(model, UpstreamSpec("poisoned", url=url), audit, **settings)
            try:
                async with serving(proxy, "lean") as served, http_client(served, **hooks) as client:
                    yield client
            finally:
                assert proxy.audit is not None
                proxy.audit.close()
        return
    proxy = gateway_proxy(model, stdio, audit, **settings)
    try:
        if transport == "stdio":
            async with lean_connected(proxy, **hooks) as (client, _):
                yield client
        else:
            async with proxy.running() as server, connected(server, **hooks) as client:
                yield client
    finally:
        assert proxy.audit is not None
        proxy.audit.close()


def rows(audit: Path, query: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(audit) as conn:
        return conn.execute(query).fetchall()


async def names(client: ClientSession) -> set[str]:
    return {t.name for t in (await client.list_tools()).tools}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_poisoned_descriptions_are_hidden_and_a_changed_tool_is_refused_until_approved(
        transport: str, mcp_model: GuardModel, tmp_path: Path) -> None:
    change, audit = tmp_path / "change.txt", tmp_path / "audit.sqlite"

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with client_of(transport, mcp_model, change, audit) as client:
            seen["first"] = await names(client)
            with pytest.raises(MCPError) as hidden:
                await client.call_tool("lookup", {"word": "x"})
            seen["hidden"] = hidden.value.error
            seen["clock"] = text_of(await client.call_tool("clock", {}))
            change.write_text("Now with seconds.")  # the rug pull: the description changes under the client
            seen["second"] = await names(client)
            with pytest.raises(MCPError) as pulled:
                await client.call_tool("clock", {})
            seen["pulled"] = pulled.value.error
        if transport == "stdio":  # the operator approves the change: the new description is pinned
            async with client_of(transport, mcp_model, change, audit, approve_tool_changes=True) as client:
                seen["approved"] = await names(client)
            async with client_of(transport, mcp_model, change, audit) as client:
                seen["after"] = await names(client)
                seen["clock_after"] = text_of(await client.call_tool("clock", {}))
        return seen

    seen = anyio.run(scenario)
    assert seen["first"] == {"clock", "vault", "touch", "forewarn_reset"}  # lookup, notes hidden
    assert seen["hidden"].code == -32602 and "hid the tool 'lookup'" in seen["hidden"].message
    assert "a hidden instruction" in seen["hidden"].message and "did not run" in seen["hidden"].message
    assert seen["clock"] == "12:00"
    assert seen["second"] == {"vault", "touch", "forewarn_reset"}  # clock changed since it was pinned
    assert "hid the tool 'clock'" in seen["pulled"].message and "changed since it was pinned" in seen["pulled"].message
    found = {(tool, kind, action) for tool, kind, action in rows(audit, "SELECT tool, kind, action FROM tool_findings")}
    assert found == {("lookup", "hidden_instruction", "hide"), ("lookup", "sensitive_reference", "warn"),
                     ("notes", "invisible_characters", "hide"), ("clock", "changed", "hide")}
    where = dict(rows(audit, "SELECT kind, location FROM tool_findings WHERE tool IN ('lookup', 'notes')"))
    assert where["invisible_characters"] == "description" and where["hidden_instruction"] == "description"
    detail = rows(audit, "SELECT detail FROM tool_findings WHERE kind='invisible_characters'")[0][0]
    assert "2 invisible character(s), the first U+200B" in detail and "\u200b" not in detail
    pins = dict(rows(audit, "SELECT tool, hash FROM tool_pins"))
    assert set(pins) == {"clock", "lookup", "notes", "vault", "touch"}
    if transport == "stdio":
        assert "clock" in seen["approved"] and "clock" in seen["after"] and seen["clock_after"] == "12:00"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_aws_key_and_a_jwt_are_redacted_after_the_guard_read_them(transport: str, mcp_model: GuardModel,
                                                                     tmp_path: Path) -> None:
    change, audit, record = tmp_path / "change.txt", tmp_path / "audit.sqlite", tmp_path / "runs.jsonl"

    async def scenario() -> str:
        async with client_of(transport, mcp_model, change, audit, redact="secrets", record=str(record)) as client:
            return text_of(await client.call_tool("vault", {"path": "vault/keys.txt"}))

    text = anyio.run(scenario)
    assert AWS_KEY not in text and JWT not in text
    assert "aws_access_key_id = [REDACTED:aws_access_key]\nsession: [REDACTED:jwt]\nend" in text
    redacted = rows(audit, "SELECT tool, kind, location, start, length FROM redactions ORDER BY id")
    plain = f"vault/keys.txt:\naws_access_key_id = {AWS_KEY}\nsession: {JWT}\nend"
    assert ("vault", "aws_access_key", "content[0].text", plain.index(AWS_KEY), 20) in redacted
    assert ("vault", "jwt", "content[0].text", plain.index(JWT), len(JWT)) in redacted
    assert {kind for _, kind, *_ in redacted} == {"aws_access_key", "jwt"}
    assert AWS_KEY.encode() not in audit.read_bytes() and JWT.encode() not in audit.read_bytes()
    # the guard read the result as it came: the state after the call has read a secret
    steps = orjson.loads(record.read_bytes().splitlines()[0])["steps"]
    assert steps[-1]["action"]["tool"] == "vault" and steps[-1]["state"]["secrets_read"] is True


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_resource_read_and_a_prompt_are_redacted_after_the_guard_read_them(
        transport: str, mcp_model: GuardModel, tmp_path: Path) -> None:
    change, audit, record = tmp_path / "change.txt", tmp_path / "audit.sqlite", tmp_path / "runs.jsonl"
    kinds = {"resource_kinds": {"vault://keys": "read_file"}, "prompt_kinds": {"handover": "other"}}

    async def scenario() -> tuple[Any, Any]:
        async with client_of(transport, mcp_model, change, audit, redact="secrets", record=str(record),
                             **kinds) as client:
            read = await client.read_resource("vault://keys")
            prompt = await client.get_prompt("handover", {"who": "Ann"})
            return read, prompt

    read, prompt = anyio.run(scenario)
    assert read.contents[0].text == "aws_access_key_id = [REDACTED:aws_access_key]"
    assert prompt.messages[0].content.text == "Hand the session [REDACTED:jwt] over to Ann."
    redacted = rows(audit, "SELECT tool, kind, location, start, length FROM redactions ORDER BY id")
    assert redacted == [("resources/read:vault://keys", "aws_access_key", "contents[0].text", 20, 20),
                        ("prompts/get:handover", "jwt", "messages[0].content.text", 17, len(JWT))]
    assert AWS_KEY.encode() not in audit.read_bytes() and JWT.encode() not in audit.read_bytes()
    # the guard read the resource as it came: the state after the read has read a secret
    steps = orjson.loads(record.read_bytes().splitlines()[0])["steps"]
    read_step = next(s for s in steps if s.get("action", {}).get("tool") == "resources/read:vault://keys")
    assert read_step["state"]["secrets_read"] is True


def test_each_finding_is_acted_on_as_configured(mcp_model: GuardModel, tmp_path: Path) -> None:
    change = tmp_path / "change.txt"

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with client_of("stdio", mcp_model, change, tmp_path / "a.sqlite",
                             descriptions={"hidden_instruction": "refuse"}) as client:
            with pytest.raises(MCPError) as refused:
                await client.list_tools()
            seen["refused"] = refused.value.error
            with pytest.raises(MCPError) as call:
                await client.call_tool("clock", {})
            seen["call"] = call.value.error
        async with client_of("sdk", mcp_model, change, tmp_path / "b.sqlite", descriptions="warn") as client:
            seen["warned"] = await names(client)
            seen["lookup"] = text_of(await client.call_tool("lookup", {"word": "x"}))
        return seen

    seen = anyio.run(scenario)
    assert seen["refused"].code == TOOLS_REFUSED
    assert "refused the server 'poisoned" in seen["refused"].message and "hidden instruction" in seen["refused"].message
    assert "refused the server" in seen["call"].message and "did not run" in seen["call"].message
    assert seen["warned"] == {"clock", "lookup", "notes", "vault", "touch", "forewarn_reset"}
    assert seen["lookup"] == "x: a word"
    assert rows(tmp_path / "a.sqlite", "SELECT DISTINCT action FROM tool_findings WHERE kind='hidden_instruction'") \
        == [("refuse",)]
    assert {a for (a,) in rows(tmp_path / "b.sqlite", "SELECT action FROM tool_findings")} == {"warn"}


def test_description_words_reach_the_state_when_asked(mcp_model: GuardModel, tmp_path: Path) -> None:
    record = tmp_path / "runs.jsonl"

    async def scenario() -> None:
        async with client_of("stdio", mcp_model, tmp_path / "change.txt", tmp_path / "a.sqlite", record=str(record),
                             descriptions={"hidden_instruction": "warn", "state": True}) as client:
            await client.list_tools()
            await client.call_tool("lookup", {"word": "x"})

    anyio.run(scenario)
    steps = orjson.loads(record.read_bytes().splitlines()[0])["steps"]
    assert steps[0]["state"]["last_call"]["description"] == ""
    last = steps[-1]["state"]["last_call"]
    assert last["tool"] == "lookup" and "read ~/.ssh/id_rsa" in last["description"]
    assert last["description_findings"] == ["hidden_instruction", "sensitive_reference"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_changed_tool_is_asked_about_until_a_person_approves_it(transport: str, mcp_model: GuardModel,
                                                                  tmp_path: Path) -> None:
    change, audit = tmp_path / "change.txt", tmp_path / "audit.sqlite"
    approver = Approver(False, True)

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with client_of(transport, mcp_model, change, audit, descriptions={"changed": "ask"},
                             elicitation_callback=approver) as client:
            await client.list_tools()
            change.write_text("Now with seconds.")
            seen["listed"] = await names(client)
            with pytest.raises(MCPError) as refused:
                await client.call_tool("clock", {})
            seen["refused"] = refused.value.error
            seen["approved"] = text_of(await client.call_tool("clock", {}))
            seen["again"] = text_of(await client.call_tool("clock", {}))
            seen["relisted"] = await names(client)
        return seen

    seen = anyio.run(scenario)
    assert "clock" in seen["listed"] and "clock" in seen["relisted"]  # listed all along: asked about, not hidden
    assert "changed since it was pinned" in seen["refused"].message and "the user refused it" in seen["refused"].message
    assert seen["approved"] == seen["again"] == "12:00"
    assert len(approver.asked) == 2 and "changed since it was pinned" in approver.asked[0].message
    assert rows(audit, "SELECT tool, kind, action FROM tool_findings WHERE kind='changed'") == [("clock", "changed", "ask")]
