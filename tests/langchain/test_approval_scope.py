"""Issue 36: an approval allows one call. A person approved deleting ``db.sqlite``; a later delete of
``users.sqlite`` leads to the same abstract state and raises no risk, yet it is a consequence nobody
saw — it is asked about again (in process, through the sidecar, under either trigger), while a read
after the approval is not."""
from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from _lc_support import thresholds
from _support import learn_deletes
from forewarn.domains.tools import ToolStateExtractor
from forewarn.errors import ThresholdWarning
from forewarn.guard import Guard, GuardModel
from forewarn.guard.judge import Why, judge_call
from forewarn.guard.langchain import ForewarnMiddleware
from forewarn.guard.langchain.testing import ScriptedChatModel, tool_calls
from forewarn.guard.spec import Action
from forewarn.guard.toolcalls.transcript import CallStatus, ToolStep, Transcript

# Deleting one file takes the run from a risk of about 0.3 to about 0.6 (of going on to delete three);
# a second delete stays in the same abstract state, at the same risk.
ASK = thresholds(ask_human=0.5)
REQUEST = "Clean up the production database folder."  # ask when p_unsafe > 0.5: after a delete, not before


def _runs() -> list[dict[str, Any]]:
    shapes = [[0, 0, 0, 0]] * 100 + [[0, 0, 1, 1]] * 40 + [[0, 1, 2, 3]] * 60
    return [{"id": f"r{i}", "steps": [{"state": {"files": {"deleted": n}}} for n in shape]}
            for i, shape in enumerate(shapes)]


@pytest.fixture(scope="module")
def delete_model(tmp_path_factory: pytest.TempPathFactory) -> GuardModel:
    model: GuardModel = learn_deletes(tmp_path_factory.mktemp("deletes"))
    return model


class Files:
    def __init__(self) -> None:
        self.ran: list[tuple[str, str]] = []

    def tools(self) -> list[StructuredTool]:
        ran = self.ran

        def read_file(path: str) -> str:
            """Read a file."""
            ran.append(("read_file", path))
            return "rows"

        def delete_file(path: str) -> str:
            """Delete a file."""
            ran.append(("delete_file", path))
            return "deleted"
        return [StructuredTool.from_function(read_file), StructuredTool.from_function(delete_file)]


def _script() -> ScriptedChatModel:
    return ScriptedChatModel(script=[tool_calls(("read_file", {"path": "notes.md"})),
                                     tool_calls(("delete_file", {"path": "db.sqlite"})),
                                     tool_calls(("read_file", {"path": "app.log"})),
                                     tool_calls(("delete_file", {"path": "users.sqlite"})),
                                     tool_calls(("delete_file", {"path": "users.sqlite"})), "Done."])


def _run(guard: Any, trigger: str, thread: str, answers: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """Run the script, answering each question in turn; returns the files asked about and what ran."""
    files = Files()
    with warnings.catch_warnings():  # (under the level trigger, rightly: first deletes are asked about)
        warnings.simplefilter("ignore", ThresholdWarning)
        mw = ForewarnMiddleware(guard, policy=ASK, trigger=trigger)
    agent = create_agent(_script(), files.tools(), middleware=[mw], checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": thread}, "metadata": {"env": "production"}}
    result = agent.invoke({"messages": [HumanMessage(REQUEST)]}, config)
    asked: list[str] = []
    while "__interrupt__" in result:
        value = result["__interrupt__"][0].value
        (request,) = value["action_requests"]
        asked.append(request["args"]["path"])
        # the card says what the run is in words: the user's request and the run's metadata
        assert f"The user asked: “{REQUEST}”" in request["description"] and "env: production" in request["description"]
        assert value["forewarn"]["request"] == REQUEST and value["forewarn"]["metadata"]["env"] == "production"
        result = agent.invoke(Command(resume={"type": answers[len(asked) - 1]}), config)
    return asked, files.ran


@pytest.fixture(params=["in-process", "sidecar"])
def guard_or_client(request: pytest.FixtureRequest, delete_model: GuardModel,
                    tmp_path: Path) -> Iterator[Any]:
    if request.param == "in-process":
        yield Guard(delete_model)
        return
    from _sidecar import KEYS, ServerThread, settings
    from forewarn.guard.client import Client

    path = delete_model.save(tmp_path / "deletes.json")
    with ServerThread(settings(tmp_path / "forewarn.db", {"deletes": path})) as server, \
            Client(server.url, api_key=KEYS["agent"]) as client:
        yield client


@pytest.mark.parametrize("trigger", ["increase", "level"])
def test_a_second_delete_is_asked_about_again(guard_or_client: Any, trigger: str) -> None:
    asked, ran = _run(guard_or_client, trigger, f"two-deletes-{trigger}", ["approve", "approve", "approve"])
    # the read after the first approval runs unasked; each delete — the same call again included — is asked
    assert asked == ["db.sqlite", "users.sqlite", "users.sqlite"]
    assert ran == [("read_file", "notes.md"), ("delete_file", "db.sqlite"), ("read_file", "app.log"),
                   ("delete_file", "users.sqlite"), ("delete_file", "users.sqlite")]


def test_a_rejected_second_delete_does_not_run(delete_model: GuardModel) -> None:
    asked, ran = _run(Guard(delete_model), "increase", "reject-second", ["approve", "reject", "reject"])
    assert asked == ["db.sqlite", "users.sqlite", "users.sqlite"]
    assert ("delete_file", "users.sqlite") not in ran


# -- the rule itself, on a bare session (what every integration calls) --------------------------------

def _state(extractor: ToolStateExtractor, steps: list[ToolStep]) -> Any:
    return extractor(Transcript(steps=tuple(steps)))


@pytest.mark.parametrize("trigger", ["increase", "level"])
def test_judge_call_scopes_an_approval_to_its_call(delete_model: GuardModel, trigger: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ThresholdWarning)
        guard = Guard(delete_model, policy=ASK.with_overrides({"trigger": trigger}))
    extractor, session = ToolStateExtractor(), guard.session()
    steps: list[ToolStep] = []
    session.observe(_state(extractor, []))

    def propose(tool: str, path: str) -> Any:
        step = ToolStep(tool, {"path": path}, CallStatus.PROPOSED)
        return judge_call(session, _state(extractor, [*steps, step]), tool, {"path": path},
                          consequential=not extractor.reads_only(tool), known=extractor.knows(tool))

    def run(tool: str, path: str, *, approved: bool = False) -> None:
        steps.append(ToolStep(tool, {"path": path}, CallStatus.SUCCESS, "ok", approved=approved))
        session.observe(_state(extractor, steps), action={"tool": tool, "args": {"path": path}}, approved=approved)

    first = propose("delete_file", "db.sqlite")
    assert first.action is Action.ASK_HUMAN and first.why is Why.GUARD
    run("delete_file", "db.sqlite", approved=True)
    assert session.accepted is not None and session.accepted.last is session.history[0]
    read = propose("read_file", "app.log")
    assert read.action is Action.ALLOW  # a read changes nothing the person weighed
    run("read_file", "app.log")
    assert session.accepted is not None  # a read does not end what the approval carries
    second = propose("delete_file", "users.sqlite")
    assert second.action is Action.ASK_HUMAN and second.why is Why.APPROVED_ONCE
    assert second.decision.p_unsafe == pytest.approx(first.decision.p_unsafe)
    # without the approval in force (judge_unchanged aside) the same call passes as before this fix
    carried = judge_call(session, _state(extractor, [*steps, ToolStep("delete_file", {"path": "users.sqlite"},
                                                                       CallStatus.PROPOSED)]),
                         "delete_file", {"path": "users.sqlite"}, consequential=False)
    assert carried.action is Action.ALLOW


def test_an_approval_lapses_when_the_run_is_back_where_the_guard_allows(delete_model: GuardModel) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ThresholdWarning)
        guard = Guard(delete_model, policy=ASK.with_overrides({"trigger": "level"}))
        session = guard.session()
    session.observe({"files": {"deleted": 0}})
    session.observe({"files": {"deleted": 1}}, action={"tool": "delete_file", "args": {}}, approved=True)
    assert session.accepted is not None
    session.observe({"files": {"deleted": 0}}, action={"tool": "restore", "args": {}})  # back below θ
    assert session.accepted is None


# -- the sidecar's proposals: the same rule, over HTTP ----------------------------------------------

def test_the_sidecars_proposals_ask_about_a_second_delete(delete_model: GuardModel, tmp_path: Path) -> None:
    import httpx

    from _sidecar import ServerThread, auth, settings

    path = delete_model.save(tmp_path / "deletes.json")
    policy = {"thresholds": {"ask_human": 0.5, "reflect": None, "stop": None}, "trigger": "increase"}
    with ServerThread(settings(tmp_path / "forewarn.db", {"deletes": path})) as server, \
            httpx.Client(base_url=server.url) as http:
        sid = http.post("/v1/sessions", json={"policy": policy, "metadata": {"env": "production"}},
                        headers=auth("agent")).json()["id"]
        deleted = 0

        def step(body: dict[str, Any]) -> None:
            answer = http.post(f"/v1/sessions/{sid}/observe", json={"ask": False, **body}, headers=auth("agent"))
            assert answer.is_success, answer.text

        def propose(tool: str, file: str, count: int) -> dict[str, Any]:
            answer = http.post(f"/v1/sessions/{sid}/proposals", headers=auth("agent"), json={
                "tool": tool, "arguments": {"path": file}, "state": {"files": {"deleted": count}}, "request": REQUEST})
            assert answer.status_code == 201, answer.text
            return dict(answer.json())

        step({"state": {"files": {"deleted": 0}}})
        first = propose("delete_file", "db.sqlite", 1)
        assert first["status"] == "pending"
        assert first["review"]["request"] == REQUEST and first["review"]["metadata"] == {"env": "production"}
        resolved = http.post(f"/v1/proposals/{first['id']}", json={"decision": "approve"}, headers=auth("approver"))
        assert resolved.is_success, resolved.text
        deleted = 1
        step({"state": {"files": {"deleted": deleted}}, "action": {"tool": "delete_file"}, "proposal": first["id"]})
        assert propose("read_file", "app.log", deleted)["status"] == "allowed"  # a read: no question
        step({"state": {"files": {"deleted": deleted}}, "action": {"tool": "read_file"}})
        second = propose("delete_file", "users.sqlite", 2)
        assert second["status"] == "pending" and second["decision"]["why"] == "approved_once"


def test_a_tool_guard_asks_its_approver_about_each_delete(delete_model: GuardModel) -> None:
    """Without LangGraph (``ToolGuard``): the same rule, the approver asked about each delete."""
    from forewarn.guard.langchain import ToolGuard

    asked: list[str] = []

    def approver(name: str, args: Any, decision: Any) -> bool:
        asked.append(args["path"])
        return True

    files = Files()
    guard = Guard(delete_model, policy=ASK)
    tools = {t.name: t for t in ToolGuard(guard, approver=approver).wrap_all(files.tools())}
    for name, path in (("read_file", "notes.md"), ("delete_file", "db.sqlite"), ("read_file", "app.log"),
                       ("delete_file", "users.sqlite")):
        tools[name].invoke({"path": path})
    assert asked == ["db.sqlite", "users.sqlite"]
    assert [path for _, path in files.ran] == ["notes.md", "db.sqlite", "app.log", "users.sqlite"]
