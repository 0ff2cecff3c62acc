"""Hostile and careless input to the lean relays (stdio: ``relay.py``, streamable HTTP: ``http_relay.py``), from
a client that writes raw bytes, in front of real upstreams: each message the relays cannot route gets one clear
error at once (never the wait for the upstream's timeout), no tools/call reaches the upstream unjudged, and the
session goes on serving."""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import orjson
import pytest
from _mcp_support import (
    ASKING,
    SERVERS,
    flaky_upstream,
    git,
    git_upstream,
    http_hello,
    http_server,
    lean_raw,
    proxy_for,
    serving,
)

from forewarn.guard import Guard, GuardModel
from forewarn.guard.mcp import UpstreamSpec
from forewarn.guard.spec import Trigger

pytestmark = pytest.mark.mcp
DEEP = "[" * 300 + "]" * 300  # (orjson reads 1024 levels, writes 254)


def call(rid: Any, name: str = "echo", **args: Any) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                         "params": {"name": name, "arguments": args}}) + b"\n"


def with_id(rid: bytes, name: str = "echo") -> bytes:
    """A tools/call whose id is ``rid`` as written (orjson would not write some of them)."""
    return b'{"jsonrpc":"2.0","id":' + rid + b',"method":"tools/call","params":{"name":"' + name.encode() + \
        b'","arguments":{"text":"hi"}}}\n'


async def answer(reader: asyncio.StreamReader) -> dict[str, Any]:
    with anyio.fail_after(30):  # (the upstream's timeout is 120 s: an answer by then came from the relay)
        message: dict[str, Any] = orjson.loads(await reader.readline())
    return message


def test_ids_and_shapes_the_stdio_relay_cannot_route_get_an_error_at_once_and_the_session_goes_on(
        mcp_model: GuardModel) -> None:
    async def scenario() -> dict[str, Any]:
        proxy = proxy_for(Guard(mcp_model), flaky_upstream(), call_timeout=120.0, unknown_tools="allow")
        seen: dict[str, Any] = {}
        async with lean_raw(proxy) as (reader, writer, _):
            for rid in (b"null", b"1.5", b"true", b'{"a":1}', b"[1]"):
                writer.write(with_id(rid))
                seen[rid.decode()] = await answer(reader)
            for key, line in (("method", b'{"jsonrpc":"2.0","id":1,"method":5}\n'),
                              ("nothing", b'{"jsonrpc":"2.0"}\n'),
                              ("deep", b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo",'
                                       b'"arguments":{"text":' + DEEP.encode() + b"}}}\n")):
                writer.write(line)
                seen[key] = await answer(reader)
            # two requests under way with one id: the second is refused, the first still answered
            writer.write(call(7, "hang", seconds=2))
            await anyio.sleep(0.5)
            writer.write(b'{"jsonrpc":"2.0","id":7,"method":"tools/list"}\n')
            seen["taken"], seen["late"] = await answer(reader), await answer(reader)
            writer.write(call("é" * 30, "hang", seconds=1))  # (named in the error by its first 40 bytes)
            await anyio.sleep(0.5)
            writer.write(call("é" * 30, text="again"))
            seen["taken again"], seen["late again"] = await answer(reader), await answer(reader)
            # the relay's own requests (ids forewarn-N) step around the ids of the client's
            writer.write(call("forewarn-1", "hang", seconds=2))
            await anyio.sleep(0.5)
            writer.write(call(8, "no_such_tool"))
            seen["unknown"], seen["mimic"] = await answer(reader), await answer(reader)
            writer.write(call(9, text="still here"))
            seen["after"] = await answer(reader)
        return seen

    seen = anyio.run(scenario)
    for rid in ("null", "1.5", "true", '{"a":1}', "[1]"):
        assert seen[rid]["id"] is None and seen[rid]["error"]["code"] == types.INVALID_REQUEST
        assert f"the id of a request is a string or an integer, not {rid}" in seen[rid]["error"]["message"]
    assert seen["method"]["id"] == 1 and "its method is not a string" in seen["method"]["error"]["message"]
    assert "neither a request, a notification nor an answer" in seen["nothing"]["error"]["message"]
    assert seen["deep"]["id"] == 2 and seen["deep"]["error"]["code"] == types.INVALID_PARAMS
    assert "nested too deep" in seen["deep"]["error"]["message"]
    assert seen["taken"] == {"jsonrpc": "2.0", "id": 7, "error": {
        "code": types.INVALID_REQUEST, "message": "Invalid Request: id 7 is taken by a request still under way"}}
    assert seen["late"]["id"] == 7 and seen["late"]["result"]["content"][0]["text"] == "late"
    assert seen["taken again"]["id"] == "é" * 30 and "is taken by a request" in seen["taken again"]["error"]["message"]
    assert seen["late again"]["id"] == "é" * 30 and seen["late again"]["result"]["content"][0]["text"] == "late"
    assert seen["unknown"]["id"] == 8 and "Unknown tool: no_such_tool" in seen["unknown"]["error"]["message"]
    assert seen["mimic"]["id"] == "forewarn-1" and seen["mimic"]["result"]["content"][0]["text"] == "late"
    assert seen["after"]["id"] == 9 and seen["after"]["result"]["content"][0]["text"] == "still here"


# a call the relay would not judge, or judge as another, where an upstream reads names regardless of case (Go's
# encoding/json: Method, Name, paramſ with U+017F), or runs notifications
SMUGGLED = [b'{"jsonrpc":"2.0","method":"tools/call","params":{"name":"touch","arguments":{}}}',
            b'{"jsonrpc":"2.0","id":3,"method":"ping","Method":"tools/call","params":{"name":"touch","arguments":{}}}',
            b'{"jsonrpc":"2.0","id":4,"METHOD":"tools/call","params":{"name":"touch","arguments":{}}}',
            b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","Name":"touch","arguments":{}}}',
            '{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}},'
            '"paramſ":{"name":"touch","arguments":{}}}'.encode()]


def test_a_tools_call_the_relay_did_not_judge_never_reaches_the_upstream(mcp_model: GuardModel,
                                                                         tmp_path: Path) -> None:
    """An upstream that runs notifications, as JSON-RPC servers may: the relay must not pass it a call it did not
    judge. A tools/call without an id is refused, and so is a message with a name the relay reads in a second
    case; the same call as a plain request is judged and runs."""
    marker = tmp_path / "touched"

    async def scenario() -> list[dict[str, Any]]:
        lenient = UpstreamSpec("lenient", command=sys.executable, args=(str(SERVERS), "lenient", str(marker)))
        proxy = proxy_for(Guard(mcp_model), lenient, unknown_tools="allow")
        async with lean_raw(proxy) as (reader, writer, _):
            writer.write(b"\n".join(SMUGGLED) + b"\n")
            writer.write(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n')  # (the upstream reads its lines in order)
            writer.write(call(2, "touch"))
            writer.write(call(7, "touch", fail=True))  # (the upstream's error is a bare string: passed on)
            writer.write(call(8, "touch"))
            return [await answer(reader) for _ in range(len(SMUGGLED) + 4)]

    *refused, pong, touched, failed, again = anyio.run(scenario)
    assert failed == {"jsonrpc": "2.0", "id": 7, "error": "boom"} and again["id"] == 8 and "result" in again
    assert [r.get("error", {}).get("code") for r in refused] == [types.INVALID_REQUEST] * len(SMUGGLED)
    assert [r["id"] for r in refused] == [None, 3, 4, 5, 6]
    messages = [r["error"]["message"] for r in refused]
    assert "a tools/call must carry an id" in messages[0]
    assert '"Method" is no name of the protocol\'s but reads as \'method\' where case is ignored' in messages[1]
    assert '"METHOD"' in messages[2] and '"Name"' in messages[3] and "reads as 'params'" in messages[4]
    assert pong == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert touched["id"] == 2 and touched["result"]["content"][0]["text"] == "touched"
    assert marker.read_text().split() == ["2", "7", "8"]  # the judged calls only


def test_calls_far_ahead_of_their_answers_are_refused_past_a_bound(mcp_model: GuardModel) -> None:
    """A session's calls run one at a time; a client that sends hundreds while the first hangs would only fill
    the relay's memory: past 256 under way, each is refused at once. The first still ends (its timeout)."""
    async def scenario() -> list[dict[str, Any]]:
        proxy = proxy_for(Guard(mcp_model), flaky_upstream(), call_timeout=3.0, unknown_tools="allow")
        async with lean_raw(proxy) as (reader, writer, _):
            writer.write(b"".join(call(n, "hang") for n in range(300)))
            return [await answer(reader) for _ in range(45)]

    answers = anyio.run(scenario)
    refused = answers[:44]
    assert [a["id"] for a in refused] == list(range(256, 300))
    assert {a["error"]["message"] for a in refused} == {"Invalid Request: 256 calls of this session are under way "
                                                          "already"}
    assert answers[44]["id"] == 0 and "did not answer tools/call 'hang' within 3 s" in answers[44]["error"]["message"]


def test_a_line_above_the_limit_gets_one_error_with_its_requests_id(mcp_model: GuardModel) -> None:
    """The line arrives in two parts, the first above the limit: one error, carrying the id its first bytes show
    (the client's call ends), and the rest of the line is not read as a line of its own."""
    head = b'{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"echo","arguments":{"text":"'

    async def scenario() -> list[dict[str, Any]]:
        proxy = proxy_for(Guard(mcp_model), flaky_upstream())
        async with lean_raw(proxy, limit=1 << 16) as (reader, writer, _):
            writer.write(head + b"x" * 100_000)
            await writer.drain()
            await anyio.sleep(0.3)
            writer.write(b"x" * 100_000 + b'"}}}\n{"jsonrpc":"2.0","id":12,"method":"ping"}\n')
            return [await answer(reader) for _ in range(2)]

    refused, pong = anyio.run(scenario)
    assert refused["id"] == 11 and refused["error"]["code"] == types.PARSE_ERROR
    assert "the line is above the proxy's limit" in refused["error"]["message"]
    assert pong == {"jsonrpc": "2.0", "id": 12, "result": {}}


def test_an_answer_to_the_relays_question_that_is_no_elicitation_result_refuses_the_call(
        mcp_model: GuardModel, repo: Path) -> None:
    """The relay asks before staging a file; the client answers with what is no elicitation result, or with an
    error whose code is no integer: asking failed, so the call is refused (its result says so) and does not run."""
    async def scenario() -> list[dict[str, Any]]:
        proxy = proxy_for(Guard(mcp_model, policy=ASKING), git_upstream(repo), trigger=Trigger.LEVEL)
        answers = []
        async with lean_raw(proxy, capabilities={"elicitation": {}}) as (reader, writer, _):
            for rid, bad in ((1, {"result": {"action": "maybe"}}), (2, {"error": {"code": "x", "message": "no"}})):
                writer.write(call(rid, "git_add", repo_path=str(repo), files=["notes.txt"]))
                question = await answer(reader)
                assert question["method"] == "elicitation/create"
                writer.write(orjson.dumps({"jsonrpc": "2.0", "id": question["id"], **bad}) + b"\n")
                answers.append(await answer(reader))
        return answers

    for refused in anyio.run(scenario):
        assert refused["result"]["isError"] is True, refused
        assert "asking failed" in refused["result"]["content"][0]["text"]
    assert git(repo, "diff", "--cached", "--name-only") == ""


def test_a_client_that_never_reads_is_read_no_further_so_the_relay_buffers_little(mcp_model: GuardModel) -> None:
    """Each line that is not JSON-RPC gets an error; a client that writes them and never reads its answers
    stops being read once the relay's output is backed up (before: every answer piled up in the relay, 150
    bytes for each 2-byte line, without bound). Once it reads, every line is answered."""
    lines = 200_000

    async def scenario() -> tuple[int, int]:
        proxy = proxy_for(Guard(mcp_model), flaky_upstream())
        async with lean_raw(proxy) as (reader, writer, relay):
            async def flood() -> None:
                writer.write(b"x\n" * lines)
                await writer.drain()

            flooding = asyncio.create_task(flood())
            await asyncio.wait((flooding,), timeout=3)  # (it cannot finish until the client reads)
            assert relay._client is not None
            buffered = relay._client.transport.get_write_buffer_size()
            answered = 0
            with anyio.fail_after(120):
                while answered < lines:
                    assert b'"code":-32700' in await reader.readline()
                    answered += 1
                await flooding
        return buffered, answered

    buffered, answered = anyio.run(scenario)
    assert buffered < 1 << 20 and answered == lines


def test_http_requests_without_a_usable_id_are_refused_before_the_upstream(mcp_model: GuardModel) -> None:
    async def scenario() -> dict[str, httpx.Response]:
        with http_server("flaky-http") as upstream:
            proxy = proxy_for(Guard(mcp_model), UpstreamSpec("flaky", url=upstream), unknown_tools="allow",
                              call_timeout=120.0)
            async with serving(proxy, "lean") as url, httpx.AsyncClient(timeout=60) as raw:
                theirs = await http_hello(raw, url)
                seen = {rid.decode(): await raw.post(url, headers=theirs, content=with_id(rid))
                        for rid in (b"null", b"1.5", b"false")}
                seen["notification"] = await raw.post(url, headers=theirs, content=b'{"jsonrpc":"2.0","method":'
                                                      b'"tools/call","params":{"name":"echo","arguments":{}}}')
                seen["smuggled"] = await raw.post(url, headers=theirs, content=SMUGGLED[4])
                seen["batch"] = await raw.post(url, headers={**theirs, "mcp-protocol-version": "2025-03-26"},
                                               content=b"[" + SMUGGLED[1] + b"]")  # (the one version with batches)
                seen["deep"] = await raw.post(url, headers=theirs, content=b'{"jsonrpc":"2.0","id":3,"method":'
                                              b'"tools/call","params":{"name":"echo","arguments":{"text":'
                                              + DEEP.encode() + b"}}}")
                # two requests under way with one id in a session: the second is refused, the first answered
                hang = asyncio.create_task(raw.post(url, headers=theirs, content=call(5, "hang", seconds=2)))
                await anyio.sleep(0.5)
                seen["taken"] = await raw.post(url, headers=theirs, json={"jsonrpc": "2.0", "id": 5,
                                                                          "method": "tools/list"})
                with anyio.fail_after(30):  # (the upstream's timeout is 120 s)
                    seen["late"] = await hang
                seen["after"] = await raw.post(url, headers=theirs, content=call(4, text="still here"))
        return seen

    seen = anyio.run(scenario)
    for key in ("null", "1.5", "false", "notification", "smuggled", "batch", "taken"):
        assert seen[key].status_code == 400 and seen[key].json()["error"]["code"] == types.INVALID_REQUEST, key
    assert "not 1.5" in seen["1.5"].json()["error"]["message"]
    assert "a tools/call must carry an id" in seen["notification"].json()["error"]["message"]
    assert "reads as 'params' where case is ignored" in seen["smuggled"].json()["error"]["message"]
    assert "in the batch, \"Method\" is no name" in seen["batch"].json()["error"]["message"]
    deep = seen["deep"].json()
    assert deep["id"] == 3 and deep["error"]["code"] == types.INVALID_PARAMS and "nested too deep" in deep["error"]["message"]
    assert seen["taken"].json()["id"] == 5 and "id 5 is taken by a request still under way" in seen["taken"].text
    for key, text in (("late", "late"), ("after", "still here")):
        got = seen[key]
        body = got.text if "json" in got.headers["content-type"] else got.text.split("data: ", 1)[1]
        assert got.status_code == 200 and orjson.loads(body)["result"]["content"][0]["text"] == text


def test_an_http_body_that_never_ends_is_answered_408_and_others_are_served_meanwhile(
        mcp_model: GuardModel, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that sends part of its body and stops: uvicorn would wait for the rest for good, holding the
    connection; the relay answers 408 after its body timeout (30 s; 1 s here)."""
    monkeypatch.setattr("forewarn.guard.mcp.http.relay.BODY_TIMEOUT", 1.0, raising=False)
    body = call(1, text="whole")

    async def scenario() -> tuple[bytes, httpx.Response]:
        with http_server("flaky-http") as upstream:
            proxy = proxy_for(Guard(mcp_model), UpstreamSpec("flaky", url=upstream), unknown_tools="allow")
            async with serving(proxy, "lean") as url, httpx.AsyncClient(timeout=60) as raw:
                theirs = await http_hello(raw, url)
                port = int(url.split(":")[2].split("/")[0])
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                head = "".join(f"{k}: {v}\r\n" for k, v in theirs.items())
                writer.write(f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n{head}content-length: {len(body) + 100}"
                             f"\r\n\r\n".encode() + body)  # (100 bytes short)
                await writer.drain()
                meanwhile = await raw.post(url, headers=theirs, content=call(2, text="meanwhile"))
                with anyio.fail_after(30):
                    stalled = await reader.read()  # (the relay closes the connection after its answer)
                writer.close()
        return stalled, meanwhile

    stalled, meanwhile = anyio.run(scenario)
    assert stalled.startswith(b"HTTP/1.1 408 ") and b"the request body did not end within 1 s" in stalled
    assert meanwhile.status_code == 200 and "meanwhile" in meanwhile.text


def test_http_calls_of_one_session_far_ahead_of_their_answers_are_refused_past_a_bound(
        mcp_model: GuardModel, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session's calls run one at a time; past ``MAX_CALLS`` under way (256; 3 here) the next is refused at
    once (429, -32600) rather than held on a connection of its own, and once they end the session goes on."""
    monkeypatch.setattr("forewarn.guard.mcp.http.relay.MAX_CALLS", 3)

    async def scenario() -> tuple[list[httpx.Response], httpx.Response, httpx.Response]:
        with http_server("flaky-http") as upstream:
            proxy = proxy_for(Guard(mcp_model), UpstreamSpec("flaky", url=upstream), unknown_tools="allow",
                              call_timeout=120.0)
            async with serving(proxy, "lean") as url, httpx.AsyncClient(timeout=60) as raw:
                theirs = await http_hello(raw, url)
                under_way = [asyncio.create_task(raw.post(url, headers=theirs, content=call(rid, "hang", seconds=1)))
                             for rid in (1, 2, 3)]
                await anyio.sleep(0.5)
                refused = await raw.post(url, headers=theirs, content=call(4, text="too far ahead"))
                with anyio.fail_after(30):
                    answered = list(await asyncio.gather(*under_way))
                after = await raw.post(url, headers=theirs, content=call(5, text="still here"))
        return answered, refused, after

    answered, refused, after = anyio.run(scenario)
    assert refused.status_code == 429 and refused.json() == {"jsonrpc": "2.0", "id": 4, "error": {
        "code": types.INVALID_REQUEST, "message": "Invalid Request: 3 calls of this session are under way already"}}
    assert [r.status_code for r in answered] == [200, 200, 200]
    assert after.status_code == 200 and "still here" in after.text
