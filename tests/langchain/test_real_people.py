"""Issue 24, guarding for real people: extractors fail closed, quiet increases, approvals on the record,
sessions that end."""
from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import httpx
import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from _lc_support import ToolLog, thresholds
from forewarn.domains.tools import ToolStateExtractor, Transcript
from forewarn.errors import ThresholdWarning
from forewarn.guard import Guard, GuardModel
from forewarn.guard.langchain import ForewarnMiddleware, TraceRecorder
from forewarn.guard.langchain._remote import MirroredSession
from forewarn.guard.langchain.errors import UnknownToolWarning
from forewarn.guard.langchain.runs import user_metadata
from forewarn.guard.langchain.testing import ScriptedChatModel, tool_calls
from forewarn.guard.replay import RunReplay
from forewarn.guard.thresholds import supported_increase
from forewarn.guard.toolcalls.placement import Placement

TASK = "Refund order 17 for Ann; read the notes first."


def _wire(log: ToolLog) -> list[Any]:
    def wire_transfer(amount: float, to: str) -> str:
        """Wire money."""
        log.ran.append(("wire_transfer", {"amount": amount, "to": to}))
        return "sent"
    return [*log.tools(), StructuredTool.from_function(wire_transfer)]


def plain(transcript: Transcript) -> Mapping[str, Any]:
    """A plain-function extractor (no ``knows``), as the docs suggest writing one."""
    return ToolStateExtractor()(transcript)


def _script() -> ScriptedChatModel:
    return ScriptedChatModel(script=[tool_calls(("read_file", {"path": "notes.md"})),
                                     tool_calls(("wire_transfer", {"amount": 5000, "to": "acct-9"})), "Done."])


# ------------------------------------------------------------------ 1. every extractor form fails closed


def test_a_plain_function_asks_about_a_tool_never_seen_in_training(tool_guard: Guard, log: ToolLog) -> None:
    assert "read_file" in tool_guard.model.provenance["tools"]  # forewarn learn records the tools runs called
    assert "wire_transfer" not in tool_guard.model.provenance["tools"]
    tools = _wire(log)
    mw = ForewarnMiddleware(tool_guard, extractor=plain, policy=thresholds(reflect=0.0))
    agent = create_agent(_script(), tools, middleware=[mw], checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "wire"}}
    with pytest.warns(UnknownToolWarning, match=r"\['wire_transfer'\]") as warned:
        paused = agent.invoke({"messages": [HumanMessage(TASK)]}, config)
    assert len([w for w in warned if issubclass(w.category, UnknownToolWarning)]) == 1  # named once
    (pending,) = paused["__interrupt__"]
    request = pending.value["action_requests"][0]
    assert request["name"] == "wire_transfer" and "cannot place the call to `wire_transfer`" in request["description"]
    assert log.names() == ["read_file"]  # not run silently
    agent.invoke(Command(resume={"type": "reject"}), config)
    assert log.names() == ["read_file"]


def test_unknown_tools_is_configurable_for_a_plain_function(tool_guard: Guard, log: ToolLog) -> None:
    mw = ForewarnMiddleware(tool_guard, extractor=plain, policy=thresholds(reflect=0.0), unknown_tools="stop")
    with pytest.warns(UnknownToolWarning, match="wire_transfer"):
        result = create_agent(_script(), _wire(log), middleware=[mw]).invoke({"messages": [HumanMessage(TASK)]})
    assert log.names() == ["read_file"] and result["messages"][-1].name == "forewarn"


def test_without_a_record_of_training_a_call_the_output_does_not_reflect_is_unplaced(
        tool_model: GuardModel, log: ToolLog) -> None:
    model = copy.copy(tool_model)
    model.provenance = {k: v for k, v in tool_model.provenance.items() if k != "tools"}  # an older model file
    base = ToolStateExtractor()

    def reads_only_files(transcript: Transcript) -> Mapping[str, Any]:  # it never looks at other tools
        kept = tuple(s for s in transcript.steps if s.name in ("read_file", "write_file"))
        return base(Transcript(transcript.user_messages, kept))

    mw = ForewarnMiddleware(Guard(model), extractor=reads_only_files, policy=thresholds(reflect=0.0),
                            unknown_tools="reflect", max_reflections=5)
    script = ScriptedChatModel(script=[tool_calls(("read_file", {"path": "notes.md"})),
                                       tool_calls(("read_file", {"path": "notes.md"})),
                                       tool_calls(("wire_transfer", {"amount": 5000, "to": "acct-9"})), "Done."])
    with pytest.warns(UnknownToolWarning, match=r"\['wire_transfer'\]"):
        result = create_agent(script, _wire(log), middleware=[mw]).invoke({"messages": [HumanMessage(TASK)]})
    # the second read changes nothing, but read_file was reflected once: it stays placed
    assert log.names() == ["read_file", "read_file"]
    held = [m for m in result["messages"] if getattr(m, "name", None) == "wire_transfer"]
    assert held and "cannot place the call to `wire_transfer`" in held[0].content


def test_placement_rules_in_order() -> None:
    class Knows:
        def __call__(self, transcript: Transcript) -> dict[str, Any]:
            return {}

        def knows(self, name: str) -> bool:
            return name == "a"

    same: dict[str, Any] = {"x": 1}
    assert Placement(Knows(), trained={"b"}).places("a", lambda: same, lambda: same)  # 1: knows decides
    assert not Placement(Knows(), trained={"b"}).places("b", lambda: same, lambda: same)
    assert Placement(plain, trained={"b"}, known_tools={"c"}).places("c", lambda: same, lambda: same)  # 2
    assert not Placement(plain, trained={"b"}).places("z", lambda: {"x": 2}, lambda: same)  # 3: never trained
    rule4 = Placement(plain)
    assert not rule4.places("z", lambda: same, lambda: same)  # 4: not reflected
    assert rule4.places("z", lambda: {"x": 2}, lambda: same)
    assert rule4.places("z", lambda: same, lambda: same)  # once reflected, placed


# ------------------------------------------------------------------ 2. increases the data supports


def test_an_increase_inside_the_new_states_interval_is_noise() -> None:
    # the lookup: 0.2802 → 0.2824, interval [9.7 %, 54.3 %]
    assert not supported_increase(0.2802, 0.2824, 0.097, 0.0)
    assert supported_increase(0.05, 0.40, 0.10, 0.0)  # the run's risk lies below the whole interval
    assert not supported_increase(0.05, 0.40, 0.10, 0.5)  # but not by min_increase
    assert supported_increase(0.2802, 0.2824, None, 0.0)  # no interval: min_increase alone
    assert not supported_increase(0.2802, 0.2824, None, 0.01)


def test_replay_scores_the_same_rule() -> None:
    run = RunReplay("r", [float(Fraction(1, 4)), float(Fraction(3, 10)), float(Fraction(9, 10))], None,
                    [None] * 3, start_risk=0.2, ci_low=(0.1, 0.22, 0.5))
    quiet = run.under_trigger(0.0).quiet
    # step 0: 0.2 → 0.25 inside [0.1, …]; step 1: 0.25 → 0.3 inside [0.22, …]; step 2: 0.3 → 0.9, 0.3 < 0.5
    assert quiet == frozenset({0, 1})
    assert run.under_trigger(0.7).quiet == frozenset({0, 1, 2})


# ------------------------------------------------------------------ 3. approvals are on the record


def test_an_approved_call_raises_no_alarm_and_is_in_the_recorded_trace(tool_guard: Guard, log: ToolLog) -> None:
    recorder = TraceRecorder()
    with pytest.warns(ThresholdWarning):
        mw = ForewarnMiddleware(tool_guard, policy=thresholds(ask_human=1.0), trigger="level")
    model = ScriptedChatModel(script=[tool_calls(("pay_invoice", {"invoice": "INV-7", "amount": 900,
                                                                  "payee": "acme"})), "Paid."])
    agent = create_agent(model, log.tools(), middleware=[mw], checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "pay"}, "callbacks": [recorder]}
    paused = agent.invoke({"messages": [HumanMessage("Pay invoice INV-7 to acme.")]}, config)
    assert paused["__interrupt__"]
    result = agent.invoke(Command(resume={"type": "approve"}), config)
    (paid,) = [m for m in result["messages"] if getattr(m, "name", None) == "pay_invoice"]
    assert "[Forewarn]" not in paid.content and paid.additional_kwargs["lc_data"]["approved"] is True
    assert log.names() == ["pay_invoice"]
    (record,) = recorder.records
    assert record["steps"][-1]["action"] == {"tool": "pay_invoice", "args": {"invoice": "INV-7", "amount": 900,
                                                                              "payee": "acme"}, "approved": True}
    assert record["steps"][-1]["state"]["payments"]["max_unconfirmed"] == 0.0  # approved: confirmed
    run = mw.get_run("pay")
    assert run is not None and run.session.history[-1].action["approved"] is True


# ------------------------------------------------------------------ 5. sessions end; metadata is the user's


def test_metadata_is_the_thread_and_the_users_keys() -> None:
    config = {"configurable": {"thread_id": 7, "checkpoint_ns": ""},
              "metadata": {"customer": "ann", "langgraph_step": 3, "langgraph_node": "model",
                           "checkpoint_ns": "x", "ls_provider": "openai", "__pregel_task_id": "t"}}
    assert user_metadata(config) == {"customer": "ann", "thread_id": "7"}


def _closed(client: Any, session_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while True:
        info: dict[str, Any] = client.get_session(session_id, limit=1)
        if info.get("closed_at") is not None or time.monotonic() > deadline:
            return info
        time.sleep(0.02)


def test_the_sidecar_session_is_closed_when_the_run_ends(tool_sidecar: Any, log: ToolLog) -> None:
    from _sidecar import KEYS
    from forewarn.guard.client import Client

    with Client(tool_sidecar.url, api_key=KEYS["agent"]) as client:
        mw = ForewarnMiddleware(client)
        model = ScriptedChatModel(script=[tool_calls(("read_file", {"path": "README.md"})), "Read it."])
        agent = create_agent(model, log.tools(), middleware=[mw], checkpointer=InMemorySaver())
        agent.invoke({"messages": [HumanMessage("Read the readme.")]},
                     {"configurable": {"thread_id": "t-close"}, "metadata": {"customer": "ann"}})
        run = mw.get_run("t-close")
        assert run is not None and run.closed and isinstance(run.session, MirroredSession)
        info = _closed(client, run.session.remote.id)
        assert info["closed_at"] is not None and info["metadata"] == {"customer": "ann", "thread_id": "t-close"}


def test_the_session_is_closed_when_a_tool_fails(tool_sidecar: Any, log: ToolLog) -> None:
    from _sidecar import KEYS
    from forewarn.guard.client import Client

    def broken(path: str) -> str:
        """Read a file."""
        raise RuntimeError("disk on fire")

    tool = StructuredTool.from_function(broken, name="read_file")
    with Client(tool_sidecar.url, api_key=KEYS["agent"]) as client:
        mw = ForewarnMiddleware(client)
        model = ScriptedChatModel(script=[tool_calls(("read_file", {"path": "README.md"})), "Read it."])
        agent = create_agent(model, [tool], middleware=[mw])
        with pytest.raises(RuntimeError, match="disk on fire"):
            agent.invoke({"messages": [HumanMessage("Read the readme.")]}, {"configurable": {"thread_id": "t-fail"}})
        run = mw.get_run("t-fail")
        assert run is not None and run.closed and isinstance(run.session, MirroredSession)
        assert _closed(client, run.session.remote.id)["closed_at"] is not None


def test_an_interrupt_does_not_end_the_run_and_close_ends_it(tool_sidecar: Any, log: ToolLog) -> None:
    from _sidecar import KEYS
    from forewarn.guard.client import Client

    with Client(tool_sidecar.url, api_key=KEYS["agent"]) as client:
        with pytest.warns(ThresholdWarning):
            mw = ForewarnMiddleware(client, policy=thresholds(ask_human=1.0), trigger="level")
        model = ScriptedChatModel(script=[tool_calls(("read_file", {"path": "README.md"})), "Read it."])
        agent = create_agent(model, log.tools(), middleware=[mw], checkpointer=InMemorySaver())
        paused = agent.invoke({"messages": [HumanMessage("Read the readme.")]}, {"configurable": {"thread_id": "t-int"}})
        assert paused["__interrupt__"]
        run = mw.get_run("t-int")
        assert run is not None and isinstance(run.session, MirroredSession)
        was_closed = run.closed  # a local: mypy would keep `run.closed` narrowed past mw.close()
        mw.close("t-int")
        assert not was_closed and run.closed and mw.get_run("t-int") is None
        assert _closed(client, run.session.remote.id)["closed_at"] is not None


def test_the_sidecar_expires_idle_sessions(tool_model: GuardModel, tmp_path: Any) -> None:
    from _sidecar import KEYS, ServerThread, settings
    from forewarn.guard.client import Client

    path = tool_model.save(tmp_path / "tools.json")
    with ServerThread(settings(tmp_path / "db.sqlite", {"tools": path}, session_idle_seconds=0.3)) as server, \
            Client(server.url, api_key=KEYS["agent"]) as client:
        session = client.session(metadata={"thread_id": "idle"})
        info = _closed(client, session.id)
        assert info["closed_at"] is not None and info["closed_by"] == "forewarn:idle"
        metrics = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {KEYS['admin']}"}).text
        assert "forewarn_sessions_open 0.0" in metrics


# ------------------------------------------------------------------ 4. async all the way


def test_the_async_hooks_commit_through_the_async_client(tool_sidecar: Any, log: ToolLog) -> None:
    import asyncio

    from _sidecar import KEYS
    from forewarn.guard.client import AsyncClient

    sent: list[str] = []

    class Counting(httpx.AsyncHTTPTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            sent.append(f"{request.method} {request.url.path}")
            return await super().handle_async_request(request)

    async def main() -> tuple[Any, Any]:
        async with AsyncClient(tool_sidecar.url, api_key=KEYS["agent"], transport=Counting()) as client:
            mw = ForewarnMiddleware(client)
            model = ScriptedChatModel(script=[tool_calls(("read_file", {"path": "README.md"})),
                                              tool_calls(("write_file", {"path": "notes.md", "content": "x"})),
                                              "Done."])
            agent = create_agent(model, log.tools(), middleware=[mw])
            await agent.ainvoke({"messages": [HumanMessage("Summarize the readme.")]},
                                {"configurable": {"thread_id": "t-async"}})
            run = mw.get_run("t-async")
            assert run is not None and run.closed and isinstance(run.session, MirroredSession)
            assert run.session.acreating is not None
            remote = await run.session.acreating
            return remote.id, await client.get_session(remote.id)

    session_id, info = asyncio.run(main())
    # created; before each call runs, the sidecar reached (fail closed: the first state, then a preview); each
    # step committed after its call; closed: all on the event loop
    assert [s.split(" ")[1].replace(session_id, "ID") for s in sent[:6]] == [
        "/v1/sessions", "/v1/batch", "/v1/sessions/ID/observe", "/v1/sessions/ID/preview",
        "/v1/sessions/ID/observe", "/v1/sessions/ID/close"]
    assert info["closed_at"] is not None and [s["action"]["tool"] if s["action"] else None
                                              for s in info["steps"]] == [None, "read_file", "write_file"]
    assert log.names() == ["read_file", "write_file"]


# ------------------------------------------------------------------ 8. per-rule actions, rules in words


def test_one_rules_violations_go_to_a_human_while_anothers_stop(write_runs: Any) -> None:
    import sys as _sys
    from pathlib import Path as _Path

    _sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
    from _support import AB, NONE, TOY_SPEC, A, B, toy_run, toy_state
    from forewarn.guard import learn_model
    from forewarn.guard.langchain._explain import approval_request
    from forewarn.guard.spec import Action, parse_spec

    spec = parse_spec(TOY_SPEC.replace("  thresholds: {reflect: 0.9, ask_human: 0.5, stop: 0.2}\n", """\
  properties:
    - name: approval_to_delete
      formula: 'F "b"'
      description: an account is deleted only with a person's approval
      thresholds: {ask_human: 0.99}
    - {name: unsafe, formula: 'F "unsafe"', thresholds: {stop: 0.5}}
"""))
    runs = write_runs([toy_run("d", [NONE, B, NONE]), toy_run("s", [NONE, A, NONE]), toy_run("u", [NONE, A, AB])],
                      "rules.jsonl")
    guard = Guard(learn_model([runs], spec))
    deleting = guard.decide(toy_state(B))
    assert deleting.action is Action.ASK_HUMAN and not deleting.unsafe_now  # to a human, not stopped
    assert guard.decide(toy_state(AB)).action is Action.STOP  # the other rule's violation stops the run
    words = approval_request(guard, deleting, "delete_account", {"id": 7})
    assert "The rule at stake: an account is deleted only with a person's approval." in words


def test_an_irreversible_call_needs_a_reason_and_the_proposal_says_why(tool_sidecar: Any) -> None:
    from _sidecar import KEYS
    from forewarn.guard.client import Client, ServerError

    task = "Check the deploy config."
    extract = ToolStateExtractor()
    with Client(tool_sidecar.url, api_key=KEYS["agent"]) as agent, \
            Client(tool_sidecar.url, api_key=KEYS["approver"]) as approver:
        session = agent.session(metadata={"thread_id": "irreversible"})
        session.observe(extract(Transcript.of(task)), ask=False)
        state = extract(Transcript.of(task, [{"name": "read_file", "args": {"path": ".env"}, "status": "proposed"}]))
        proposal = session.propose("read_file", {"path": ".env"}, state, ask=True)
        review = proposal["review"]
        assert review["irreversible"] and review["before"]["p_unsafe"] is not None
        assert {"predicate": "secret_read", "holds": True,
                "description": "the agent has read a credential or secret"} in review["changes"]
        with pytest.raises(ServerError, match="reason") as refused:
            approver.resolve_proposal(proposal["id"], "approve")
        assert refused.value.code == "reason_required"
        done = approver.resolve_proposal(proposal["id"], "approve", "the deploy needs the key; I watch it")
        assert done["status"] == "approved"
        metrics = httpx.get(f"{tool_sidecar.url}/metrics", headers={"Authorization": f"Bearer {KEYS['admin']}"}).text
        assert 'forewarn_decisions_total{action="ask_human",op="propose"}' in metrics
        assert 'forewarn_approvals_resolved_total{status="approved"}' in metrics


def test_the_approver_sees_the_likeliest_path_and_when_the_agent_gives_up(tool_sidecar: Any,
                                                                          tool_model: GuardModel) -> None:
    """The proposal's path is `forewarn states`'s "most likely path to unsafe" from the state the call
    leads to, told as what each step flips; its deadline is the agent's timeout from its creation."""
    import math
    from itertools import pairwise

    from _sidecar import KEYS
    from forewarn.guard.client import Client
    from forewarn.guard.states import state_rows

    task = "Check the deploy config."
    extract = ToolStateExtractor()
    start = extract(Transcript.of(task))
    reading = extract(Transcript.of(task, [{"name": "read_file", "args": {"path": ".env"}, "status": "proposed"}]))
    with Client(tool_sidecar.url, api_key=KEYS["agent"]) as agent:
        session = agent.session(metadata={"thread_id": "path"})
        session.observe(start, ask=False)
        proposal = session.propose("read_file", {"path": ".env"}, reading, ask=True, timeout=90)
        agent.cancel_proposal(proposal["id"], "done looking")
    local = Guard(tool_model).session()
    local.observe(start)
    decision = local.preview(reading)
    assert decision.index is not None
    rows = state_rows(tool_model)
    row = rows[decision.index]
    assert row.path is not None and row.path_probability is not None
    expected = []
    for here, there in pairwise(row.path):
        flips = [{"predicate": name, "holds": rows[there].predicates[name],
                  "description": tool_model.spec.predicates[name].description}
                 for name in rows[there].predicates if rows[here].predicates[name] != rows[there].predicates[name]]
        if flips or rows[there].unsafe:
            expected.append({"changes": flips, "unsafe": rows[there].unsafe})
    review = proposal["review"]
    assert review["path"] == {"probability": row.path_probability, "steps": expected}
    assert expected and expected[-1]["unsafe"]
    assert review["path"]["probability"] <= proposal["risk"]["p_unsafe"]  # one path of all that lead there
    assert math.isclose(review["deadline"] - proposal["created_at"], 90, abs_tol=1e-6)
