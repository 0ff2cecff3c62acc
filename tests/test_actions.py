"""A step's action in predicates: its CEL shape for text actions, tool calls and none, and every
path that reads it (traces, the runtime's observe and preview, errors)."""
from __future__ import annotations

import math
from typing import Any

import pytest

from forewarn.errors import PredicateError, TraceError
from forewarn.guard.actions import NO_ACTION, action_class, action_view
from forewarn.guard.predicates import PredicateSet
from forewarn.guard.spec import parse_spec
from forewarn.guard.traces import abstract_run, parse_document

ACTION_SPEC = """\
name: acts
predicates:
  picked: 'action.verb == "pick"'
  phone: 'action.object == "CellPhone"'
  mail_out: '"external" in action.classes'
  acted: 'action.present'
  hot: 'state.hot'
  mailer: 'action.kind == "email_send" && meta.strict'
unsafe: 'hot && picked'
"""


def bits_of(predicates: PredicateSet, **holding: bool) -> int:
    return sum(1 << predicates.names.index(name) for name, value in holding.items() if value)


@pytest.fixture(scope="module")
def predicates() -> PredicateSet:
    return PredicateSet(parse_spec(ACTION_SPEC))


def test_text_action_parts() -> None:
    view = action_view("  pick   CellPhone ")
    assert view["present"] is True and view["raw"] == "  pick   CellPhone "
    assert (view["name"], view["verb"], view["object"], view["words"]) == \
        ("pick CellPhone", "pick", "CellPhone", ["pick", "CellPhone"])
    assert (view["tool"], view["kind"], view["args"], view["classes"]) == ("", "", {}, [])
    assert action_view("open")["object"] == ""
    assert action_view({"action": "find Bowl"})["name"] == "find Bowl"


def test_tool_call_parts() -> None:
    call = {"tool": "send_email", "args": {"to": "eve@evil.example", "body": "hello"}}
    view = action_view(call)
    assert view["raw"] is call and view["present"] is True
    assert (view["name"], view["verb"], view["tool"], view["kind"]) == ("send_email", "send_email", "send_email",
                                                                        "email_send")
    assert view["args"] == call["args"] and view["classes"] == ["external"] and view["words"] == []
    assert action_view({"tool": "send_email", "args": {"to": "bob@corp.example"}})["classes"] == []
    assert action_view({"name": "http_get", "arguments": {"url": "https://web.example/x"}})["classes"] == \
        ["untrusted_source"]
    assert action_view({"tool": "pay", "args": {"amount": 900}})["classes"] == ["over_limit", "payment"]
    assert action_view({"tool": "my_tool", "args": {"q": 1}})["kind"] == "other"
    assert action_view({"tool": "send_email", "args": {}})["classes"] == ["unreadable"]
    assert action_view({"tool": "fetch", "input": "https://web.example"})["args"] == {"value": "https://web.example"}


def test_missing_and_odd_actions_are_well_defined() -> None:
    assert action_view(None) is NO_ACTION
    assert NO_ACTION == {"present": False, "raw": None, "name": "", "verb": "", "object": "", "words": [],
                         "tool": "", "kind": "", "args": {}, "classes": []}
    other = action_view({"x": 1})
    assert other["present"] is True and other["tool"] == "" and other["args"] == {"x": 1}
    assert action_view(7)["raw"] == 7 and action_view(7)["name"] == ""


def test_action_classes_for_memory() -> None:
    text, call = action_view("pick CellPhone"), action_view({"tool": "send_email", "args": {"to": "e@evil.example"}})
    assert [action_class(text, c) for c in ("raw", "verb", "tool")] == ["pick CellPhone", "pick", "pick"]
    assert [action_class(call, c) for c in ("raw", "verb", "tool")] == ["send_email[external]", "send_email",
                                                                         "email_send"]
    assert [action_class(NO_ACTION, c) for c in ("raw", "verb", "tool")] == ["", "", ""]


def test_predicates_read_the_action(predicates: PredicateSet) -> None:
    assert predicates.reads_action
    state = {"hot": False}
    assert predicates.evaluate(state, {"strict": True}, "pick CellPhone") == \
        bits_of(predicates, picked=True, phone=True, acted=True)
    assert predicates.evaluate(state, {"strict": True}, "pick Apple") == bits_of(predicates, picked=True, acted=True)
    call = {"tool": "send_email", "args": {"to": "eve@evil.example"}}
    assert predicates.evaluate(state, {"strict": True}, call) == bits_of(predicates, mail_out=True, acted=True,
                                                                          mailer=True)
    assert predicates.evaluate(state, {"strict": False}, call) == bits_of(predicates, mail_out=True, acted=True)
    assert predicates.evaluate({"hot": True}, {"strict": True}) == bits_of(predicates, hot=True)
    # memoised answers stay right when only the action changes
    for _ in range(2):
        assert predicates.evaluate(state, {"strict": True}, "pick CellPhone") != \
            predicates.evaluate(state, {"strict": True}, "find CellPhone")


def test_a_spec_without_action_predicates_ignores_actions() -> None:
    plain = PredicateSet(parse_spec("predicates:\n  hot: 'state.hot'\nunsafe: hot\n"))
    assert not plain.reads_action
    assert plain.evaluate({"hot": True}, None, "pick CellPhone") == 1


def test_a_missing_argument_names_the_action() -> None:
    reads_to = PredicateSet(parse_spec("predicates:\n  to_eve: 'action.args.to == \"eve\"'\nunsafe: to_eve\n"))
    assert reads_to.evaluate({}, None, {"tool": "send_email", "args": {"to": "eve"}}) == 1
    with pytest.raises(PredicateError, match="reads field 'to', which the step's action lacks") as caught:
        reads_to.evaluate({}, None, "pick CellPhone")
    assert caught.value.where == "action"
    run = parse_document({"id": "r", "steps": [{"state": {}, "action": {"tool": "x", "args": {"to": "eve"}}},
                                               {"state": {}, "action": "look"}]}, source="t.jsonl", line=3)
    with pytest.raises(TraceError, match=r"t\.jsonl:3.*steps\[1\]\.action \(run 'r'\)"):
        abstract_run(run, reads_to)


def test_abstract_run_reads_each_steps_action(predicates: PredicateSet) -> None:
    run = parse_document({"id": "r", "meta": {"strict": True}, "steps": [
        {"state": {"hot": False}},
        {"state": {"hot": False}, "action": "pick CellPhone"},
        {"state": {"hot": True}, "action": {"tool": "send_email", "args": {"to": "a@b.example"}}},
        {"state": {"hot": True}, "action": "pick Apple"}]})
    assert abstract_run(run, predicates) == [
        0, bits_of(predicates, picked=True, phone=True, acted=True),
        bits_of(predicates, hot=True, mail_out=True, acted=True, mailer=True),
        bits_of(predicates, hot=True, picked=True, acted=True)]


def _learn(runs: list[dict[str, Any]], spec: str, tmp_path: Any) -> Any:
    import orjson

    from forewarn.guard.pipeline import learn_model

    traces = tmp_path / "runs.jsonl"
    traces.write_text("\n".join(orjson.dumps(r).decode() for r in runs) + "\n", encoding="utf-8")
    return learn_model([traces], parse_spec(spec))


def test_runtime_reads_the_action_on_observe_and_preview(tmp_path: Any) -> None:
    from forewarn.guard.runtime import Guard

    spec = ("predicates:\n  picked: 'action.verb == \"pick\"'\n  hot: 'state.hot'\nunsafe: 'hot'\n"
            "learning: {alpha: 0.0, shrink: 'off', intervals: none}\n")
    runs = [{"id": f"u{i}", "steps": [{"state": {"hot": False}}, {"state": {"hot": False}, "action": "pick X"},
                                      {"state": {"hot": True}, "action": "burn X"}]} for i in range(3)]
    runs += [{"id": f"s{i}", "steps": [{"state": {"hot": False}}, {"state": {"hot": False}, "action": "look"}]}
             for i in range(3)]
    guard = Guard(_learn(runs, spec, tmp_path))
    session = guard.session()
    session.observe({"hot": False})
    ahead = session.preview({"hot": False}, action="pick X")
    assert ahead.abstract_state == {"picked": True, "hot": False} and ahead.p_unsafe == 1.0
    # "look" leaves the predicates as at the start: from there 3 of 9 departures pick, 3 stay, 3 end (p = 1/2)
    look = session.preview({"hot": False}, action="look").p_unsafe
    assert look is not None and math.isclose(look, 0.5)
    assert session.preview({"hot": False}).abstract_state == {"picked": False, "hot": False}
    assert len(session.history) == 1
    committed = session.observe({"hot": False}, action="pick X")
    assert committed.abstract_state["picked"] and session.history[-1].action == "pick X"
    assert guard.decide({"hot": False}, None, "pick X").abstract_state["picked"]


def test_ingested_agent_logs_carry_actions_predicates_read() -> None:
    """`forewarn ingest` writes each tool call as the step's action: action predicates read it as logged."""
    from forewarn.guard.ingest.agents import AgentLog, Call, resolve_extractor, to_run

    log = AgentLog(id="r", source="log.jsonl", line=1, user=["Summarise the page."], calls=[
        Call("http_get", {"url": "https://web.example/page"}, result="text"),
        Call("send_email", {"to": "eve@evil.example", "body": "text"}, result="sent")])
    run = to_run(log, resolve_extractor(None), "langchain")
    spec = parse_spec("predicates:\n  fetched: '\"untrusted_source\" in action.classes'\n"
                      "  mails_out: 'action.kind == \"email_send\" && \"external\" in action.classes'\n"
                      "unsafe: mails_out\n")
    assert abstract_run(run, PredicateSet(spec)) == [0, 1, 2]
