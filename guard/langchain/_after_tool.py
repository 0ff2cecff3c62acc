"""After a tool ran: the state the call led to, committed, and its result annotated.

The look-ahead judged the call on what it would do; its result can show more (content
that turns out to hold a secret). The committed state's decision, when it is news, is
appended to the tool's result as a risk alert, and a ``stop`` there ends the run at the
next model call (:func:`stopped_after_tool`) — a tool node cannot end it. A call a
human approved or edited is marked so in its result, and an edit is told to the model.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from .._extras import extra_error

try:
    from langchain.agents.middleware.types import ToolCallRequest
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
    from langgraph.types import Command
except ModuleNotFoundError as exc:
    raise extra_error("langchain", "forewarn.guard.langchain._after_tool", exc) from None

from ..judge import same_state
from ..runtime import Decision, StepRecord
from ..spec import Action
from ..telemetry import record_decision
from ..toolcalls.transcript import CallStatus, ToolStep, Transcript
from . import _explain as explain
from ._judge import Judge
from ._messages import forewarn_data, mark, message_text
from ._remote import MirroredSession
from .review import Review
from .runs import GuardedRun, Intervention

ToolResult = ToolMessage | Command[Any]


def after_tool(judge: Judge, run: GuardedRun, request: ToolCallRequest, result: ToolResult,
               review: Review | None) -> ToolResult:
    """Commit the state the call led to; the tool's result, with what the model must know added."""
    with judge.lock:
        message, step, transcript, before = _ran(run, request, result, review)
        decision = judge.decide(run.session, transcript, step, commit=True)
    return _annotated(judge, run, request, result, review, message, decision, before)


async def aafter_tool(judge: Judge, run: GuardedRun, request: ToolCallRequest, result: ToolResult,
                      review: Review | None) -> ToolResult:
    """:func:`after_tool` for the async hooks: the commit to a sidecar is awaited, not waited on."""
    with judge.lock:
        message, step, transcript, before = _ran(run, request, result, review)
    decision = await judge.adecide(run.session, transcript, step)
    return _annotated(judge, run, request, result, review, message, decision, before)


def _ran(run: GuardedRun, request: ToolCallRequest, result: ToolResult,
         review: Review | None) -> tuple[ToolMessage | None, ToolStep, Transcript, StepRecord | None]:
    """The call as it ran, the transcript it ends, the last step before it (under the middleware's lock)."""
    call = request.tool_call
    message = result if isinstance(result, ToolMessage) else _tool_message_in(result, call.get("id"))
    text = message_text(message.content) if message is not None else None
    error = message is not None and message.status == "error"
    step = ToolStep(call["name"], call["args"], CallStatus.ERROR if error else CallStatus.SUCCESS, text,
                    id=call.get("id"), approved=review is not None)
    run.verdicts.pop(call.get("id") or "", None)
    if isinstance(run.session, MirroredSession):  # the step a sidecar proposal led to, linked to it
        run.session.proposal = run.proposals.pop(call.get("id") or "", None)
    transcript = run.transcripts.transcript(request.state["messages"]).then(step)
    before = run.session.history[-1] if run.session.history else None
    return message, step, transcript, before


def _annotated(judge: Judge, run: GuardedRun, request: ToolCallRequest, result: ToolResult,
               review: Review | None, message: ToolMessage | None, decision: Decision,
               before: StepRecord | None) -> ToolResult:
    """The tool's result with what the model must know added (nothing, usually)."""
    call = request.tool_call
    approved = review is not None
    news = decision.action is not Action.ALLOW and not (
        not judge.judge_unchanged and decision.action is not Action.STOP and before is not None
        and before.action is not None and same_state(before.decision, decision)) and not (
        # a human approved (or edited) this call: its consequences are theirs to take, no alarm to the model
        # (the state it led to differs from the one previewed when the approval itself is part of it)
        review is not None and decision.action is not Action.STOP)
    record_decision(decision, tool=call["name"], phase="observed", session=run.id, call_id=call.get("id"),
                    action=decision.action if news else Action.ALLOW)
    if not news and not approved:  # the common case: nothing to add to the result
        return result
    marks: dict[str, Any] = {"phase": "observed"}
    notes: list[str] = []
    if approved:
        marks["approved"] = True
    if review is not None and review.type == "edit":
        marks["executed_call"] = {"name": call["name"], "args": call["args"]}
        notes.append(f"Note: a human reviewer replaced your call before it ran; it ran as "
                     f"{explain.describe_call(call['name'], call['args'])}. Do not re-issue your original call.")
    if news:  # a risky state the look-ahead could not see (or did, and a human let it through)
        words = explain.after_call(judge.guard, decision)
        marks.update(action=decision.action.value, explanation=words, decision=decision.to_dict())
        notes.append(words)
        with judge.lock:
            run.record(Intervention(call.get("id"), call["name"], call["args"], decision, decision.action,
                                     "alerted"))
    if message is None or len(marks) == 1:
        return result
    content: Any = message.content
    for note in notes:
        content = _append(content, note)
    marked = mark(message.model_copy(update={"content": content}), marks)
    if isinstance(result, ToolMessage):
        return marked
    update = dict(result.update) if isinstance(result.update, dict) else {}
    update["messages"] = [marked if m is message else m for m in update.get("messages", [])]
    return replace(result, update=update)


def stopped_after_tool(messages: Sequence[BaseMessage]) -> AIMessage | None:
    """The run's final message when a tool that just ran led to a state the policy stops at (or a
    call a reviewer edited was stopped before it ran)."""
    for message in reversed(messages):
        if not isinstance(message, ToolMessage):
            return None
        data = forewarn_data(message)
        if data and data.get("phase") == "observed" and data.get("action") == Action.STOP.value:
            text = (str(data.get("explanation", "")) if data.get("executed") is False else
                    f"Forewarn stopped this run after `{message.name}` ran. {data.get('explanation', '')}".strip())
            return mark(AIMessage(content=text, name="forewarn"), {"phase": "stopped", "action": "stop"})
    return None


def _tool_message_in(command: Command[Any], call_id: str | None) -> ToolMessage | None:
    update = command.update
    if not isinstance(update, dict):
        return None
    for message in update.get("messages", []) or []:
        if isinstance(message, ToolMessage) and message.tool_call_id == call_id:
            return message
    return None


def _append(content: Any, text: str) -> Any:
    if isinstance(content, str):
        return f"{content}\n\n{text}" if content else text
    if isinstance(content, list):
        return [*content, {"type": "text", "text": text}]
    return text
