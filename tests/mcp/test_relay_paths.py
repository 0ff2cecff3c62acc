"""The lean stdio relay's own machinery: lines cut as they come (``Lines``), the session's turn (``Turn``:
one judged call at a time, taken at once by the fast path), and calls of one session sent at once — the
first on the fast path, the others waiting for their turn — each answered and recorded, in order."""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from _mcp_support import TIME_SERVER, lean_connected, proxy_for, text_of

from forewarn.guard import Guard, GuardModel
from forewarn.guard.mcp import UpstreamSpec
from forewarn.guard.mcp._frames import Turn
from forewarn.guard.mcp.stdio._transport import Lines, Overlong


def test_lines_cuts_a_stream_into_lines_as_it_comes_and_drops_one_above_the_limit() -> None:
    lines: list[bytes] = []
    too_long: list[int] = []
    ids: list[Any] = []

    def told(exc: Overlong) -> None:
        too_long.append(len(lines))
        ids.append(exc.id)
    cut = Lines(lines.append, told, limit=10)
    cut.feed(b'{"a":1}\n{"b"')  # one line and the start of the next
    cut.feed(b':2}\n\n{"c":3}\n')
    assert lines == [b'{"a":1}\n', b'{"b":2}\n', b"\n", b'{"c":3}\n'] and too_long == []
    cut.feed(b"0123456789012")  # above the limit before its newline: told once, dropped to its newline
    cut.feed(b"345\nok\n")
    assert too_long == [4] and lines[4:] == [b"ok\n"]
    cut.feed(b"0123456789\n")  # eleven bytes with the newline: one above the limit
    assert too_long == [4, 5] and len(lines) == 5
    cut.feed(b'{"last":1}')
    assert cut.end() == b'{"last":1}' and cut.end() == b""
    assert ids == [None, None]
    cut = Lines(lines.append, told, limit=20)  # the id a line's first bytes show, whole or in parts
    cut.feed(b'{"jsonrpc":"2.0","id":7,"method":"x"}\n{"id":"a\\"b","method"')
    cut.feed(b':"y","params":{}}\n')
    assert ids[2:] == [7, 'a"b']


def test_turn_is_handed_on_in_order_and_taken_at_once_only_when_free() -> None:
    async def scenario() -> tuple[list[str], bool, bool, bool]:
        turn, order = Turn(), []
        assert turn.take_now()

        async def waiter(name: str) -> None:
            await turn.acquire()
            order.append(name)
            await asyncio.sleep(0)
            turn.release()

        tasks = [asyncio.create_task(waiter(name)) for name in ("first", "second", "third")]
        await asyncio.sleep(0)
        tasks[1].cancel()  # a waiter cancelled in the queue never gets the turn
        await asyncio.sleep(0)
        held_while_queued = not turn.take_now()
        turn.release()  # handed to "first", never free in between
        still_held = turn.locked()
        await asyncio.gather(*tasks, return_exceptions=True)
        return order, held_while_queued, still_held, turn.take_now()

    order, held_while_queued, still_held, free_at_the_end = asyncio.run(scenario())
    assert order == ["first", "third"]
    assert held_while_queued and still_held and free_at_the_end


@pytest.mark.mcp
def test_calls_of_one_session_sent_at_once_are_each_answered_and_recorded_in_turn(
        mcp_model: GuardModel, tmp_path: Path) -> None:
    record = tmp_path / "runs.jsonl"
    zones = ["UTC", "Europe/Paris", "Asia/Tokyo", "America/New_York"]

    async def scenario() -> dict[str, str]:
        upstream = UpstreamSpec("time", command=TIME_SERVER, args=("--local-timezone", "UTC"))
        answers: dict[str, str] = {}
        async with lean_connected(proxy_for(Guard(mcp_model), upstream, record=str(record))) as (client, _):
            async def call(zone: str) -> None:
                answers[zone] = text_of(await client.call_tool("get_current_time", {"timezone": zone}))

            async with anyio.create_task_group() as tasks:  # sent together: one fast, the others wait their turn
                for zone in zones:
                    tasks.start_soon(call, zone)
        return answers

    answers = anyio.run(scenario)
    assert {zone: orjson.loads(text)["timezone"] for zone, text in answers.items()} == {z: z for z in zones}
    run: dict[str, Any] = orjson.loads(record.read_bytes())
    steps = [s["action"] for s in run["steps"][1:]]
    assert [s["tool"] for s in steps] == ["get_current_time"] * 4
    assert sorted(s["args"]["timezone"] for s in steps) == sorted(zones)
    assert run["steps"][-1]["state"]["steps"] == 4  # each folded into the state after the one before


def test_lines_paused_by_a_line_hands_on_no_more_until_resumed_in_order() -> None:
    """A line that makes its reader stop (the relay's output to the client is backed up) stops the rest of the
    bytes at hand too: they are kept, with what comes meanwhile, and handed on in order once resumed."""
    lines: list[bytes] = []

    def took(line: bytes) -> None:
        lines.append(line)
        if line == b"stop\n":
            cut.paused = True
    cut = Lines(took, lambda exc: None, limit=100)
    cut.feed(b"a\nstop\nb\nc")
    assert lines == [b"a\n", b"stop\n"]
    cut.feed(b"\nd\n")  # (came while paused)
    assert len(lines) == 2
    cut.resume()
    assert lines == [b"a\n", b"stop\n", b"b\n", b"c\n", b"d\n"] and cut.end() == b""
