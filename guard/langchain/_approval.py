"""Asking a human about a call that needs approval, in the agent's tool node.

The loop (:func:`review_call`): the human is asked through the graph's ``interrupt``
(answered with ``Command(resume=...)``), or with ``approvals="sidecar"`` through the
sidecar's approvers (:func:`~guard.langchain._remote.review_on_sidecar`). An answer
Forewarn cannot act on — a mistyped one, or an edit to a tool the agent lacks — is asked
again with the error in the payload, instead of failing the thread on every later resume.
An edited call is judged again, as if the model had proposed it. The payload and the
answers it accepts are :mod:`guard.langchain.review`'s.

Beside LangChain's ``HumanInTheLoopMiddleware`` (:func:`unless_forewarn_asks`), a call
both would interrupt is asked once, by Forewarn.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .._extras import extra_error

try:
    from langchain.agents.middleware.types import ToolCallRequest
    from langchain_core.messages import ToolMessage
    from langgraph.types import interrupt
except ModuleNotFoundError as exc:
    raise extra_error("langchain", "forewarn.guard.langchain._approval", exc) from None

from ...errors import ForewarnError
from ..spec import Action
from ..toolcalls.transcript import CallStatus, ToolStep
from . import _explain as explain
from ._judge import Judge
from ._lookahead import not_run, recheck
from ._messages import last_request
from ._remote import MirroredSession, propose_allowed, review_on_sidecar
from .review import Review, ReviewType, check_edit, parse_review, review_payload
from .runs import GuardedRun, Intervention, Verdict


def review_call(judge: Judge, run: GuardedRun, request: ToolCallRequest,
                verdict: Verdict) -> tuple[ToolCallRequest, Review] | ToolMessage:
    """Ask a human about the call; an edited call is judged again, as if the model had proposed it
    (allowed: it runs; needs approval: the human is asked about the edited call; held back: it
    does not run), and an edit the guard cannot read is asked again with the error.

    Returns the call to run (as edited) and the review; or the
    tool message a call that does not run gets instead.
    """
    decision, description, edit, error = verdict.decision, verdict.description, None, None
    proposal: str | None = None  # on a sidecar: the proposal the human answered
    while True:
        call = request.tool_call
        state = _state_of(judge, run, request) if judge.approvals == "sidecar" else None
        if state is not None:  # (a call the guard cannot read is asked through the interrupt)
            review, proposal = _ask_sidecar(judge, run, request, state, edit_of=proposal if edit else None)
        else:
            payload = review_payload(call["name"], call["args"], call.get("id"), description, decision,
                                     judge.settings.allowed_decisions,
                                     context={"request": last_request(request.state["messages"]),
                                              "metadata": dict(run.session.metadata or {})})
            review = ask(request, payload if error is None else {**payload, "forewarn_error": error},
                         judge.settings.allowed_decisions)
        if review.type == "reject":
            with judge.lock:
                run.verdicts.pop(call.get("id") or "", None)
                run.record(Intervention(call.get("id"), call["name"], call["args"], decision, Action.ASK_HUMAN,
                                         "rejected"))
            reason = f" The user's reason: {review.message}" if review.message else ""
            text = (f"The user rejected the call to {explain.describe_call(call['name'], call['args'])}; it "
                    f"was not executed.{reason} Do not retry it unless the user asks for it.")
            return not_run(call, text, {"action": "reject", "decision": decision.to_dict()})
        if review.type == "approve":
            with judge.lock:
                run.record(Intervention(call.get("id"), call["name"], call["args"], decision, Action.ASK_HUMAN,
                                         "approved" if edit is None else "edited"))
                if proposal is not None:
                    run.proposals[call.get("id") or ""] = proposal
            return request, edit or review
        name = review.name or call["name"]
        tool = request.tool if name == call["name"] else next(t for t in request.runtime.tools if t.name == name)
        # langgraph's override() types `tool` as BaseTool though the request's own field may be None
        edited = request.override(tool_call={**call, "name": name, "args": review.args or {}},
                                  tool=tool)  # type: ignore[arg-type]
        with judge.lock:
            run.record(Intervention(call.get("id"), call["name"], call["args"], decision, Action.ASK_HUMAN,
                                     "edited"))
            try:
                again = recheck(judge, run, edited.tool_call, request.state["messages"])
            except ForewarnError as exc:  # unreadable: the reviewer answers again, nothing ran
                error = f"Forewarn cannot read the edited call: {exc}. Nothing ran; answer again."
                continue
        if isinstance(again, ToolMessage):
            return again
        request, edit, error = edited, review, None
        if again.action is Action.ALLOW:
            if proposal is not None:  # the edit, re-checked, is recorded on the sidecar too
                _propose_allowed(judge, run, request, proposal)
            return request, review
        decision, description = again.decision, again.description  # still needs approval: ask about the edit


def ask(request: ToolCallRequest, payload: dict[str, Any], allowed: tuple[ReviewType, ...]) -> Review:
    """Interrupt until the answer is one Forewarn can act on: a mistyped answer (``{"type":
    "approved"}``) or an edit to a tool the agent lacks re-asks with the error in the payload
    (``forewarn_error``), instead of failing the thread on every later resume."""
    call = request.tool_call
    while True:
        answer = interrupt(payload)
        try:
            return check_edit(parse_review(answer, allowed), call, [t.name for t in request.runtime.tools])
        except ValueError as exc:
            payload = {**payload, "forewarn_error": f"{exc}. Nothing ran; answer again."}


def _state_of(judge: Judge, run: GuardedRun, request: ToolCallRequest) -> Mapping[str, Any] | None:
    """The state the call would lead to (None when the guard cannot read it)."""
    call = request.tool_call
    step = ToolStep(call["name"], call["args"], CallStatus.PROPOSED, id=call.get("id"))
    try:
        with judge.lock:
            return judge.extract(run.transcripts.transcript(request.state["messages"]).then(step), step)
    except ForewarnError:
        return None


def _ask_sidecar(judge: Judge, run: GuardedRun, request: ToolCallRequest, state: Mapping[str, Any], *,
                 edit_of: str | None) -> tuple[Review, str]:
    """Ask the sidecar's approvers (its console) and wait; an answer this agent does not allow is a rejection."""
    assert isinstance(run.session, MirroredSession)
    tools = sorted(t.name for t in request.runtime.tools)
    return review_on_sidecar(run.session, request.tool_call, state, tools, edit_of=edit_of,
                             timeout=judge.approval_timeout, allowed=judge.settings.allowed_decisions,
                             request=last_request(request.state["messages"]))


def _propose_allowed(judge: Judge, run: GuardedRun, request: ToolCallRequest, edit_of: str) -> None:
    assert isinstance(run.session, MirroredSession)
    state = _state_of(judge, run, request)
    if state is None:
        return
    call = request.tool_call
    proposal = propose_allowed(run.session, call, state, sorted(t.name for t in request.runtime.tools),
                               edit_of=edit_of)
    with judge.lock:
        run.proposals[call.get("id") or ""] = proposal


# -- beside LangChain's HumanInTheLoopMiddleware ------------------------------------------

def unless_forewarn_asks(judge: Judge, original: Callable[[ToolCallRequest], bool] | None
                         ) -> Callable[[ToolCallRequest], bool]:
    """A ``when`` predicate for an ``interrupt_on`` entry of LangChain's HITL middleware: false for
    the calls Forewarn itself asks about, else ``original``'s answer (true without one)."""
    def when(request: ToolCallRequest) -> bool:
        if _will_ask(judge, request):
            return False
        return True if original is None else bool(original(request))
    return when


def _will_ask(judge: Judge, request: ToolCallRequest) -> bool:
    call_id = request.tool_call.get("id")
    messages = (request.state or {}).get("messages")
    if not call_id or not messages:
        return False
    run = judge.run_of(messages)
    with judge.lock:
        verdict = run.verdicts.get(call_id)
    return verdict is not None and verdict.action is Action.ASK_HUMAN
