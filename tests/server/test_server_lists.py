"""The list endpoints (sessions, approvals, proposals) take the same filters, alike (issue 36: ``GET
/v1/sessions?status=all`` was a 422 while ``/v1/proposals?status=all`` worked): ``status`` with ``all``,
``session_id``, a time window ``since``/``until`` (a window backwards is a one-line 422), ``offset`` and
``limit`` (capped by ``limits.max_page``, and echoed), and a bad value of any is a one-line 422 naming it."""
from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from _sidecar import ServerThread, auth, egg_state, settings
from forewarn.server.settings import Limits

ASK = {"thresholds": {"ask_human": 1.0, "reflect": None, "stop": None}, "trigger": "level"}
RISKY = egg_state(in_microwave=True, toggled=True, closed=True, holding=False)
LISTS = {"sessions": "agent", "approvals": "approver", "proposals": "approver"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, builtin_path: Path) -> Iterator[dict[str, Any]]:
    """Three sessions, each with one pending approval and one pending proposal; the first one closed (its
    approval and proposal cancelled with it)."""
    folder = tmp_path_factory.mktemp("lists")
    config = settings(folder / "forewarn.db", {"builtin": builtin_path}, limits=Limits(max_page=2))
    with ServerThread(config) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        made: list[dict[str, Any]] = []
        for _ in range(3):
            sid = http.post("/v1/sessions", json={"policy": ASK}, headers=auth("agent")).json()["id"]
            step = http.post(f"/v1/sessions/{sid}/observe", json={"state": RISKY}, headers=auth("agent")).json()
            assert step["approval_id"], step
            proposal = http.post(f"/v1/sessions/{sid}/proposals", json={"tool": "toggle", "arguments": {},
                                                                        "state": RISKY}, headers=auth("agent"))
            assert proposal.status_code == 201 and proposal.json()["status"] == "pending", proposal.text
            made.append({"session": sid, "approval": step["approval_id"], "proposal": proposal.json()["id"],
                         "at": time.time()})
            time.sleep(0.05)
        assert http.post(f"/v1/sessions/{made[0]['session']}/close", headers=auth("agent")).status_code == 200
        yield {"http": http, "made": made}


def _ids(world: dict[str, Any], kind: str, **query: Any) -> list[str]:
    """Every row the list gives, page by page (limits.max_page is 2)."""
    ids: list[str] = []
    while True:
        answer = world["http"].get(f"/v1/{kind}", params={"limit": 1000, "offset": len(ids), **query},
                                   headers=auth(LISTS[kind]))
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["offset"] == len(ids) and body["limit"] == 1000  # echoed on every list
        if not body[kind]:
            return ids
        ids += [row["id"] for row in body[kind]]


def _own(world: dict[str, Any], kind: str, i: int) -> str:
    return str(world["made"][i][kind[:-1]])


@pytest.mark.parametrize("kind", sorted(LISTS))
def test_status_all_lists_everything(world: dict[str, Any], kind: str) -> None:
    everything = _ids(world, kind, status="all")
    assert sorted(everything) == sorted(_own(world, kind, i) for i in range(3))
    first = {"sessions": "closed", "approvals": "cancelled", "proposals": "cancelled"}[kind]
    rest = {"sessions": "open", "approvals": "pending", "proposals": "pending"}[kind]
    assert _ids(world, kind, status=first) == [_own(world, kind, 0)]
    assert sorted(_ids(world, kind, status=rest)) == sorted(_own(world, kind, i) for i in (1, 2))


@pytest.mark.parametrize("kind", sorted(LISTS))
def test_session_id_and_time_window(world: dict[str, Any], kind: str) -> None:
    made = world["made"]
    assert _ids(world, kind, status="all", session_id=made[1]["session"]) == [_own(world, kind, 1)]
    # since the first was made: the second and third were asked; a session open at some moment since then,
    # the first too (closed at the end)
    since = made[0]["at"] + 0.01
    after = (0, 1, 2) if kind == "sessions" else (1, 2)
    assert sorted(_ids(world, kind, status="all", since=since)) == sorted(_own(world, kind, i) for i in after)
    until = made[1]["at"]
    expected = {_own(world, kind, i) for i in (0, 1)}
    assert set(_ids(world, kind, status="all", until=until)) == expected
    backwards = world["http"].get(f"/v1/{kind}", params={"since": 2.0, "until": 1.0}, headers=auth(LISTS[kind]))
    assert backwards.status_code == 422 and backwards.json()["error"]["field"] == "query.since", backwards.text
    assert "\n" not in backwards.json()["error"]["message"]


@pytest.mark.parametrize("kind", sorted(LISTS))
def test_paging_is_capped_and_echoed(world: dict[str, Any], kind: str) -> None:
    http: httpx.Client = world["http"]
    pages = [http.get(f"/v1/{kind}", params={"status": "all", "offset": offset, "limit": 1000},
                      headers=auth(LISTS[kind])).json() for offset in (0, 2)]
    assert [len(p[kind]) for p in pages] == [2, 1]  # limits.max_page is 2
    assert [(p["offset"], p["limit"]) for p in pages] == [(0, 1000), (2, 1000)]
    assert sorted(r["id"] for p in pages for r in p[kind]) == sorted(_own(world, kind, i) for i in range(3))


@pytest.mark.parametrize("kind", sorted(LISTS))
@pytest.mark.parametrize("query", [{"status": "nope"}, {"session_id": "a b"}, {"since": -1}, {"until": "x"},
                                   {"offset": -1}, {"limit": 0}, {"limit": 1001}])
def test_a_bad_filter_is_a_one_line_422_naming_it(world: dict[str, Any], kind: str, query: dict[str, Any]) -> None:
    answer = world["http"].get(f"/v1/{kind}", params=query, headers=auth(LISTS[kind]))
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"] == f"query.{next(iter(query))}" and "\n" not in error["message"]


def test_proposals_by_tool(world: dict[str, Any]) -> None:
    assert len(_ids(world, "proposals", status="all", tool="toggle")) == 3
    assert _ids(world, "proposals", status="all", tool="open") == []
