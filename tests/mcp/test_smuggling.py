"""Attacks on where a line ends (issue 36): every path forwards what the guard judged, never other bytes.

The relays cut the client's input at ``\\n``; the MCP SDK's stdio server also ends a line at ``\\r`` (universal
newlines), and a reader built on ``str.splitlines`` at NEL, U+2028 and U+2029 too. A notification the relay
passed on whole was, upstream, a ``tools/call`` nobody judged — even in a session the guard had stopped. Each
path is attacked: the lean stdio relay (in this process, and as ``forewarn mcp`` on real pipes beside the SDK
path), the lean HTTP relay (before a bridge that cuts bodies into lines) and the SDK path over stdio and HTTP;
and JSON-RPC batches the protocol does not allow."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import orjson
import pytest
from _mcp_support import SERVERS, connected, http_hello, http_server, lean_raw, proxy_for, serving, text_of
from mcp.shared.exceptions import MCPError

from forewarn.guard import Guard, GuardModel
from forewarn.guard.mcp import HELD_BACK, SESSION_STOPPED, UpstreamSpec

pytestmark = pytest.mark.mcp

# touch has no kind (unknown_tools: stop), echo is harmless
HARMLESS_ECHO: dict[str, Any] = {"tool_kinds": {"echo": "other"}, "argument_aliases": {}}
STOPPING = {**HARMLESS_ECHO, "unknown_tools": "stop"}
SEPARATORS = {"NEL": "\x85", "LS": "\u2028", "PS": "\u2029", "CR": "\r"}


def plain(line: bytes) -> bool:
    """Whether no reader of lines cuts ``line`` before its final newline."""
    return not any(sep.encode() in line for sep in SEPARATORS.values())


def marking(marker: Path, cut: str = "sdk") -> UpstreamSpec:
    return UpstreamSpec("marking", command=sys.executable, args=(str(SERVERS), "marking", str(marker), cut))


def call(rid: Any, name: str, **args: Any) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                         "params": {"name": name, "arguments": args}}) + b"\n"


def smuggled(rid: int, text: str) -> bytes:
    """One notification to a reader that ends lines at ``\\n`` only; a tools/call of ``touch`` between two
    lines that are no JSON to one that ends them at ``\\r`` too."""
    return b'{"jsonrpc":"2.0","method":"notifications/x","params":\r' + call(rid, "touch", text=text)[:-1] + b"\r}\n"


def smuggled_deep(rid: int, text: str) -> bytes:
    """:func:`smuggled` with a member nested deeper than orjson writes (254 levels; it reads 1024): a relay that
    forwarded the bytes it could not write again would pass the ``\r`` on."""
    return smuggled(rid, text).replace(b'"params":', b'"deep":' + b"[" * 300 + b"]" * 300 + b',"params":', 1)


def echo_raw(rid: int, text: str) -> bytes:
    """A call of echo whose text goes as raw UTF-8 (orjson writes no escapes but for control characters)."""
    return b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"%s"}}}\n' % (
        rid, text.encode())


def test_the_stdio_relay_passes_no_smuggled_call_even_once_the_session_is_stopped(mcp_model: GuardModel,
                                                                                   tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    async def scenario() -> list[dict[str, Any]]:
        proxy = proxy_for(Guard(mcp_model), marking(marker), **STOPPING)
        async with lean_raw(proxy) as (reader, writer, _):
            writer.write(smuggled(90, "before"))
            writer.write(call(1, "touch", text="judged"))  # stopped: and so is the session
            writer.write(smuggled(91, "after"))
            writer.write(smuggled_deep(92, "deep"))
            writer.write(b'{"jsonrpc":"2.0","id":2,"method":"ping"}\n')
            with anyio.fail_after(60):
                answers = [orjson.loads(await reader.readline()) for _ in range(3)]
            await anyio.sleep(1)  # (the upstream runs a call in a task of its own)
        # (the first call lists the tools first: the others overtake it)
        return sorted(answers, key=lambda a: -1 if a["id"] is None else a["id"])

    deep, stopped, pong = anyio.run(scenario)
    assert deep["error"]["code"] == types.INVALID_REQUEST and "nested too deep" in deep["error"]["message"]
    assert stopped["id"] == 1 and stopped["error"]["code"] == SESSION_STOPPED
    assert pong == {"jsonrpc": "2.0", "id": 2, "result": {}}
    assert not marker.exists(), marker.read_text()


@pytest.mark.parametrize("relay", ["lean", "sdk"])
def test_forewarn_mcp_on_pipes_passes_no_smuggled_call(model_file: Path, tmp_path: Path, relay: str) -> None:
    """The same on the proxy's own standard input, either relay (the SDK path parses every message itself)."""
    marker = tmp_path / "ran"
    proc = subprocess.Popen([sys.executable, "-m", "forewarn", "mcp", "--model", str(model_file), "--tool-kind",
                             "echo=other", "--unknown-tools", "stop", "--relay", relay, "--", sys.executable,
                             str(SERVERS), "marking", str(marker), "sdk"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    hello = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
    try:
        proc.stdin.write(orjson.dumps(hello) + b'\n{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        proc.stdin.write(smuggled(90, "before") + call(1, "touch", text="judged") + smuggled(91, "after"))
        proc.stdin.write(b'{"jsonrpc":"2.0","id":2,"method":"ping"}\n')
        proc.stdin.flush()
        answers = sorted((orjson.loads(proc.stdout.readline()) for _ in range(3)), key=lambda a: a["id"])
        proc.stdin.write(echo_raw(3, "done"))
        proc.stdin.flush()
        answers.append(orjson.loads(proc.stdout.readline()))
    finally:
        proc.stdin.close()
        proc.wait(timeout=120)
        proc.stdout.close()
    assert answers[1]["id"] == 1 and answers[1]["error"]["code"] == SESSION_STOPPED
    assert answers[2] == {"jsonrpc": "2.0", "id": 2, "result": {}}
    assert answers[3]["id"] == 3 and answers[3]["error"]["code"] == SESSION_STOPPED
    assert not marker.exists(), marker.read_text()


def test_the_stdio_relay_forwards_line_separators_escaped_both_ways(mcp_model: GuardModel, tmp_path: Path) -> None:
    """An upstream that cuts lines as str.splitlines does gets each call whole (raw NEL, U+2028, U+2029 in a
    string, escaped; ``\\r`` between tokens, dropped), and the client gets the answers on one line each; a
    separator the client wrote escaped goes on as it came."""
    marker = tmp_path / "ran"

    async def scenario() -> list[tuple[bytes, dict[str, Any]]]:
        proxy = proxy_for(Guard(mcp_model), marking(marker, "splitlines"), call_timeout=10.0,
                          **HARMLESS_ECHO)
        lines = [echo_raw(rid, f"a{sep}b") for rid, sep in enumerate(SEPARATORS.values(), start=1) if sep != "\r"]
        lines.append(b'{"jsonrpc":"2.0","id":4,"method":"tools/call",\r"params":{"name":"echo","arguments":'
                     b'{"text":"cr"}}}\n')
        lines.append(b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":'
                     b'{"text":"a\\u2028b"}}}\n')
        answers = []
        async with lean_raw(proxy) as (reader, writer, _):
            for line in lines:
                writer.write(line)
                with anyio.fail_after(30):
                    raw = await reader.readline()
                answers.append((raw, orjson.loads(raw)))
        return answers

    answers = anyio.run(scenario)
    expected = ["a\x85b", "a\u2028b", "a\u2029b", "cr", "a\u2028b"]
    for (raw, answer), text in zip(answers, expected):
        assert plain(raw), raw
        assert answer.get("result", {}).get("content", [{}])[0].get("text") == text, answer


def test_the_lean_http_relay_passes_no_smuggled_call_nor_a_batch_the_protocol_does_not_allow(
        mcp_model: GuardModel, tmp_path: Path) -> None:
    """Before a bridge that cuts each body into lines (flattening nested batches, reading the first of a key
    written twice): a body of one notification (also with a member nested too deep to write again), a message
    with a key written twice, a nested batch, a batch with a key written twice, a batch in protocol 2025-06-18 —
    none runs a call."""
    marker = tmp_path / "ran"
    inner = call(5, "touch", text="nested")[:-1]

    async def scenario() -> dict[str, httpx.Response]:
        with http_server("lines-http", str(marker)) as upstream:
            proxy = proxy_for(Guard(mcp_model), UpstreamSpec("lines", url=upstream), **STOPPING)
            async with serving(proxy, "lean") as url, httpx.AsyncClient(timeout=60) as raw:
                theirs = await http_hello(raw, url)
                old = {**theirs, "mcp-protocol-version": "2025-03-26"}
                seen = {"stopped": await raw.post(url, headers=theirs, content=call(1, "touch", text="judged"))}
                seen["smuggled"] = await raw.post(url, headers=theirs, content=smuggled(91, "after"))
                seen["deep"] = await raw.post(url, headers=theirs, content=smuggled_deep(92, "deep"))
                # (orjson reads the last of a key written twice, the bridge the first)
                seen["key twice"] = await raw.post(url, headers=theirs, content=b'{"jsonrpc":"2.0","id":10,"method":'
                                                   b'"tools/call","method":"ping","params":{"name":"touch",'
                                                   b'"arguments":{"text":"twice"}}}')
                seen["nested"] = await raw.post(url, headers=old, content=b"[[" + inner + b"]]")
                seen["twice"] = await raw.post(url, headers=old, content=b'[{"jsonrpc":"2.0","id":6,"method":'
                                               b'"tools/call","method":"ping","params":{"name":"touch",'
                                               b'"arguments":{"text":"twice"}}}]')
                seen["new"] = await raw.post(url, headers=theirs, content=b'[{"jsonrpc":"2.0","id":7,"method":"ping"}]')
                seen["old"] = await raw.post(url, headers=old, content=b'[{"jsonrpc":"2.0","id":8,"method":"ping"}]')
                seen["echo"] = await raw.post(url, headers=theirs, content=echo_raw(9, "a\u2028b"))
        return seen

    seen = anyio.run(scenario)
    assert seen["stopped"].json()["error"]["code"] == SESSION_STOPPED
    for key, said in (("nested", "is no JSON-RPC message (a batch holds objects only)"),
                      ("twice", 'the key "method" is written twice in one object'),
                      ("new", "MCP protocol 2025-06-18 does not allow")):
        assert seen[key].status_code == 400 and said in seen[key].json()["error"]["message"], key
    assert seen["old"].status_code == 200 and seen["old"].json() == {"jsonrpc": "2.0", "id": 8, "result": {}}
    assert seen["deep"].status_code == 400 and "nested too deep" in seen["deep"].json()["error"]["message"]
    assert seen["key twice"].json() == {"jsonrpc": "2.0", "id": 10, "result": {}}  # (a ping: what the relay read)
    assert seen["echo"].json()["error"]["code"] == SESSION_STOPPED
    assert not marker.exists(), marker.read_text()


def test_the_lean_http_relay_reads_an_event_stream_as_the_client_does(mcp_model: GuardModel, tmp_path: Path) -> None:
    """An upstream's event stream whose events a ``\r\r`` ends: the client gets one answer, the one the relay
    read and committed (before, the relay read both events as one, passed them on, and then answered again)."""
    async def scenario() -> httpx.Response:
        with http_server("lines-http", str(tmp_path / "ran")) as upstream:
            proxy = proxy_for(Guard(mcp_model), UpstreamSpec("lines", url=upstream), **HARMLESS_ECHO)
            async with serving(proxy, "lean") as url, httpx.AsyncClient(timeout=60) as raw:
                theirs = await http_hello(raw, url)
                return await raw.post(url, headers=theirs, content=call(4, "echo", text="sse"))

    got = anyio.run(scenario)
    if "json" in got.headers["content-type"]:
        answers = [got.json()]
    else:  # (an event stream: its lines end at \r\n, \r or \n)
        lines = got.text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        answers = [orjson.loads(line[5:]) for line in lines if line.startswith("data:")]
    assert [a["id"] for a in answers] == [4], answers


@pytest.mark.parametrize("over", ["memory", "http"])
def test_the_sdk_path_writes_line_separators_escaped_to_its_stdio_upstream(mcp_model: GuardModel, tmp_path: Path,
                                                                          over: str) -> None:
    """The SDK's client writes pydantic's JSON, which leaves NEL, U+2028 and U+2029 raw: an upstream cutting
    lines as str.splitlines does would get pieces, never the call judged."""
    marker = tmp_path / "ran"

    async def scenario() -> list[str]:
        proxy = proxy_for(Guard(mcp_model), marking(marker, "splitlines"), call_timeout=10.0,
                          **HARMLESS_ECHO)
        texts = []
        if over == "memory":
            async with proxy.running() as server, connected(server) as client:
                for sep in SEPARATORS.values():
                    texts.append(text_of(await client.call_tool("echo", {"text": f"a{sep}b"})))
            return texts
        async with serving(proxy, "sdk") as url, httpx.AsyncClient(timeout=60) as raw:
            theirs = await http_hello(raw, url)
            for rid, sep in enumerate(SEPARATORS.values(), start=1):
                got = await raw.post(url, headers=theirs, content=call(rid, "echo", text=f"a{sep}b"))
                body = got.text if "json" in got.headers["content-type"] else got.text.split("data: ", 1)[1]
                texts.append(orjson.loads(body)["result"]["content"][0]["text"])
        return texts

    assert anyio.run(scenario) == [f"a{sep}b" for sep in SEPARATORS.values()]


# -- resources/read and prompts/get: judged and recorded as steps --------------------------------------------

READ = b'{"jsonrpc":"2.0","id":%d,"method":"resources/read","params":{"uri":"note://secret"}}\n'
PROMPT = b'{"jsonrpc":"2.0","id":%d,"method":"prompts/get","params":{"name":"review","arguments":{"topic":"x"}}}\n'
KNOWN = {"resource_kinds": {"note://secret": "read_file"}, "prompt_kinds": {"review": "other"}}


def recorded(record: Path) -> list[str]:
    return [s["action"]["tool"] for line in record.read_bytes().splitlines()
            for s in orjson.loads(line)["steps"] if "action" in s]


@pytest.mark.parametrize("known", [False, True])
def test_the_stdio_relay_judges_and_records_resource_reads_and_prompts(mcp_model: GuardModel, tmp_path: Path,
                                                                       known: bool) -> None:
    """Without a kind they get unknown_tools (reflect here): held back, and they do not run; with one they run
    and are recorded as calls of resources/read:URI and prompts/get:NAME."""
    marker, record = tmp_path / "ran", tmp_path / "runs.jsonl"

    async def scenario() -> list[dict[str, Any]]:
        proxy = proxy_for(Guard(mcp_model), marking(marker), unknown_tools="reflect", record=str(record),
                          **(KNOWN if known else {}))
        async with lean_raw(proxy) as (reader, writer, _):
            answers = []
            for line in (READ % 1, PROMPT % 2):
                writer.write(line)
                with anyio.fail_after(30):
                    answers.append(orjson.loads(await reader.readline()))
        return answers

    read, prompt = anyio.run(scenario)
    if not known:
        for answer in (read, prompt):
            assert answer["error"]["code"] == HELD_BACK and "Forewarn held back the call" in answer["error"]["message"]
        assert not marker.exists()
        return
    assert read["result"]["contents"][0]["text"] == "the note\u2028its second line"
    assert prompt["result"]["messages"][0]["content"]["text"] == "Review x"
    assert marker.read_text().splitlines() == ["read note://secret", "prompt review x"]
    assert recorded(record) == ["resources/read:note://secret", "prompts/get:review"]


@pytest.mark.parametrize("relay", ["lean", "sdk"])
def test_over_http_resource_reads_and_prompts_are_judged_and_stopped_sessions_refuse_them(
        mcp_model: GuardModel, tmp_path: Path, relay: str) -> None:
    marker = tmp_path / "ran"

    async def scenario() -> list[dict[str, Any]]:
        with http_server("flaky-http") as upstream:  # (the lean HTTP relay: an HTTP upstream)
            spec = UpstreamSpec("flaky", url=upstream) if relay == "lean" else marking(marker)
            proxy = proxy_for(Guard(mcp_model), spec, **STOPPING)
            async with serving(proxy, relay) as url, httpx.AsyncClient(timeout=60) as raw:
                theirs = await http_hello(raw, url)
                answers = []
                for body in (READ % 1, PROMPT % 2):
                    got = await raw.post(url, headers=theirs, content=body)
                    answers.append(orjson.loads(got.text if "json" in got.headers["content-type"]
                                                else got.text.split("data: ", 1)[1]))
        return answers

    read, prompt = anyio.run(scenario)
    assert read["error"]["code"] == SESSION_STOPPED and "resources/read:note://secret" in read["error"]["message"]
    assert prompt["error"]["code"] == SESSION_STOPPED
    assert not marker.exists()


def test_the_sdk_path_judges_and_records_resource_reads(mcp_model: GuardModel, tmp_path: Path) -> None:
    marker, record = tmp_path / "ran", tmp_path / "runs.jsonl"

    async def scenario() -> tuple[MCPError, str, str]:
        proxy = proxy_for(Guard(mcp_model), marking(marker), unknown_tools="reflect", record=str(record),
                          prompt_kinds={"review": "other"})
        async with proxy.running() as server, connected(server) as client:
            with pytest.raises(MCPError) as held:
                await client.read_resource("note://secret")
            prompt = await client.get_prompt("review", {"topic": "y"})
        assert isinstance(prompt.messages[0].content, types.TextContent)
        return held.value, prompt.messages[0].content.text, marker.read_text()

    held, prompt, ran = anyio.run(scenario)
    assert held.error.code == HELD_BACK and "resources/read:note://secret" in held.error.message
    assert prompt == "Review y" and ran.splitlines() == ["prompt review y"]
    assert recorded(record) == ["prompts/get:review"]


def test_a_read_with_no_kind_gets_unknown_resources_and_a_prompt_unknown_tools(mcp_model: GuardModel,
                                                                               tmp_path: Path) -> None:
    """unknown_resources: ask_human — the client is asked (elicitation) and its approval runs the read; prompts
    keep unknown_tools (reflect)."""
    marker = tmp_path / "ran"

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        proxy = proxy_for(Guard(mcp_model), marking(marker), unknown_tools="reflect", unknown_resources="ask_human")
        async with lean_raw(proxy, capabilities={"elicitation": {}}) as (reader, writer, _):
            with anyio.fail_after(30):
                writer.write(READ % 1)
                question = orjson.loads(await reader.readline())
                writer.write(orjson.dumps({"jsonrpc": "2.0", "id": question["id"], "result": {
                    "action": "accept", "content": {"approve": True}}}) + b"\n")
                read = orjson.loads(await reader.readline())
                writer.write(PROMPT % 2)
                prompt = orjson.loads(await reader.readline())
        return question, read, prompt

    question, read, prompt = anyio.run(scenario)
    # (the id of a question to the client has a random part: an upstream, which sees the relay's counter in its
    # own requests to it, cannot send a request of its own with that id and have the answer taken for the relay's)
    assert question["method"] == "elicitation/create" and re.fullmatch(r"forewarn-[0-9a-f]{16}-\d+", question["id"])
    assert "resources/read:note://secret" in question["params"]["message"]
    assert read["id"] == 1 and read["result"]["contents"][0]["text"] == "the note\u2028its second line"
    assert prompt["id"] == 2 and prompt["error"]["code"] == HELD_BACK
    assert marker.read_text().splitlines() == ["read note://secret"]


def test_the_config_reads_kinds_and_actions_for_resources_and_prompts() -> None:
    from forewarn.errors import ConfigError
    from forewarn.guard.mcp.config import config_from
    from forewarn.guard.spec import Action

    spec = {"servers": {"s": {"command": "x"}}, "unknown_tools": "stop"}
    plain_config = config_from(spec)
    assert plain_config.unknown_for("resources/read:a") is Action.STOP is plain_config.unknown_for("prompts/get:p")
    config = config_from({**spec, "resource_kinds": {"file:///a/.env": "read_file"}, "prompt_kinds": {"p": "other"},
                          "unknown_resources": "reflect"})
    assert config.unknown_for("resources/read:b") is Action.REFLECT and config.unknown_for("prompts/get:q") is Action.STOP
    assert config.step_kinds()["resources/read:file:///a/.env"] == "read_file"
    assert config.step_aliases()["resources/read:file:///a/.env"] == {"uri": "path"}
    for wrong, said in (({"resource_kinds": {"u": "reader"}}, "resource_kinds['u'] = 'reader' is not a tool kind"),
                        ({"unknown_prompts": "maybe"}, "field 'unknown_prompts': 'maybe' is not an action")):
        with pytest.raises(ConfigError, match=re.escape(said)):
            config_from({**spec, **wrong})
