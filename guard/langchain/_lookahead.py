"""The look-ahead over one model turn: each proposed call judged on the state it would lead to.

Calls are judged in order, each after the ones before it (on a scratch copy of the
session, so monitors step through them and nothing is committed). The first call the
decision holds back (reflect) holds back the rest of the turn; a stop holds back all of
it and ends the run; calls let through carry a verdict (allow, or ask a human) to the
tool node.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._extras import extra_error

try:
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
except ModuleNotFoundError as exc:
    raise extra_error("langchain", "forewarn.guard.langchain._lookahead", exc) from None

from ..judge import APPROVED_ONCE_NOTE, Why
from ..runtime import Decision, Session
from ..spec import Action
from ..telemetry import record_decision
from ..toolcalls.transcript import CallStatus, ToolStep, Transcript
from . import _explain as explain
from ._judge import Judge
from ._messages import forewarn_data, last_request, mark
from .runs import GuardedRun, Intervention, Outcome, Verdict


class Turn:
    """The look-ahead over the tool calls of one model turn."""

    def __init__(self, judge: Judge, run: GuardedRun, base: Transcript,
                 messages: Sequence[BaseMessage], *, record: bool = True) -> None:
        self._judge = judge
        self.settings = judge.settings
        self.guard = judge.guard  # the guard under the effective policy
        self.run = run
        self.base = base
        self.messages = messages
        self.record = record

    def judge(self, proposal: AIMessage) -> tuple[dict[str, Verdict], list[BaseMessage]]:
        """Verdicts on the calls let through, and the messages for the calls held back."""
        calls = proposal.tool_calls
        verdicts: dict[str, Verdict] = {}
        accepted: list[ToolStep] = []
        # Later calls of the turn are judged after the earlier ones, on a scratch copy of the
        # session (monitors step through the accepted calls; nothing is committed).
        session = self.run.session
        for i, call in enumerate(calls):
            step = ToolStep(call["name"], call["args"], CallStatus.PROPOSED, id=call["id"])
            verdict = self._judge.judge_call(session, self.base.then(*accepted, step), step)
            decision, action = verdict.decision, verdict.action
            note = (unknown_note(call["name"], action) if verdict.why is Why.UNKNOWN_TOOL
                    else APPROVED_ONCE_NOTE if verdict.why is Why.APPROVED_ONCE else "")
            if action is Action.REFLECT and (count := reflections(self.messages)) >= self.settings.max_reflections:
                action = self.settings.on_reflection_limit
                note += (f" Forewarn already asked the model to revise its plan {count} time(s) since the "
                        f"user's last message, its limit.")
            if self.record:  # one span per decision acted on (a no-op unless the application set up OpenTelemetry)
                record_decision(decision, tool=call["name"], phase="proposed", session=self.run.id,
                                call_id=call["id"], action=action)
            if action is Action.REFLECT:
                self._record(call, decision, action, "held back")
                text = (decision.message if verdict.why is Why.SHIELD  # the shield's words: the move, the safer ones
                        else explain.held_back(self.guard, decision, call["name"], call["args"],
                                               self.settings.reflection_template)) + note
                return verdicts, self._hold_back(calls[i:], text, "reflect", decision)
            if action is Action.STOP:
                self._record(call, decision, action, "stopped")
                return {}, self._stop(calls, i, decision, note)
            if action is Action.ASK_HUMAN:
                description = explain.approval_request(
                    self.guard, decision, call["name"], call["args"], request=last_request(self.messages),
                    metadata=self.run.session.metadata) + note
                verdicts[call["id"] or ""] = Verdict(Action.ASK_HUMAN, decision, description)
            else:
                verdicts[call["id"] or ""] = Verdict(Action.ALLOW, decision)
            accepted.append(step)
            if i < len(calls) - 1:
                session = self._advance(session, accepted, step, asked=action is Action.ASK_HUMAN)
        return verdicts, []

    def _advance(self, session: Session, accepted: list[ToolStep], step: ToolStep, *, asked: bool) -> Session:
        """A scratch copy of ``session`` one step on (the call ``step``, not committed); a call a human
        will be asked about runs only if approved, so the calls after it are judged as after an approval."""
        # the last committed step is all the judge reads of the history (a whole copy per call would grow with the run)
        scratch = Session(session.guard, session.history[-1:], session.monitor_states, metadata=session.metadata,
                          baseline=session.baseline, belief=session.belief, accepted=session.accepted, traced=False)
        concrete = self._judge.try_extract(self.base.then(*accepted), step)
        if concrete is not None:
            scratch.observe(concrete, action={"tool": step.name, "args": step.args}, approved=asked)
        return scratch

    def _record(self, call: Mapping[str, Any], decision: Decision, action: Action, outcome: Outcome) -> None:
        if self.record:
            self.run.record(Intervention(call.get("id"), call["name"], call["args"], decision, action, outcome))

    @staticmethod
    def _hold_back(calls: Sequence[Mapping[str, Any]], text: str, kind: str, decision: Decision) -> list[BaseMessage]:
        """Tool messages for calls that will not run: the first gets ``text``, the rest a note."""
        first = calls[0]
        out: list[BaseMessage] = [not_run(first, text, {"action": kind, "decision": decision.to_dict()})]
        for call in calls[1:]:
            out.append(not_run(call, f"Not executed: Forewarn held back an earlier call of this turn "
                                      f"(`{first['name']}`). Plan again.", {"action": kind}))
        return out

    def _stop(self, calls: Sequence[Mapping[str, Any]], index: int, decision: Decision,
              note: str) -> list[BaseMessage]:
        call = calls[index]
        text = explain.stopped_before(self.guard, decision, call["name"], call["args"]) + note
        replies: list[BaseMessage] = []
        for j, other in enumerate(calls):
            body = ("Not executed: Forewarn stopped the run before this call (see its last message)." if j == index
                    else f"Not executed: Forewarn stopped the run before `{call['name']}`, a call of the same turn.")
            replies.append(not_run(other, body, {"action": "stop"}))
        final = mark(AIMessage(content=text, name="forewarn"),
                     {"phase": "stopped", "action": "stop", "decision": decision.to_dict()})
        return [*replies, final]


def recheck(judge: Judge, run: GuardedRun, call: Mapping[str, Any],
            messages: Sequence[BaseMessage]) -> Verdict | ToolMessage:
    """The look-ahead on a call a reviewer edited, as if the model had proposed it: a verdict
    (allow: it runs; ask_human: a human is asked again, about the edited call) or, when it is
    held back, the tool message it gets instead of running (a stop also ends the run).

    Raises:
        ForewarnError: the edited call cannot be read (and no fallback action is configured).
    """
    turn = Turn(judge, run, run.transcripts.transcript(messages), messages)
    verdicts, added = turn.judge(AIMessage(content="", tool_calls=[dict(call)]))
    if not added:
        return verdicts[call.get("id") or ""]
    held = added[0]
    assert isinstance(held, ToolMessage)
    if len(added) > 1:  # a stop: the tool node cannot end the run, the next model call does (as after a tool)
        held = mark(held, {**(forewarn_data(held) or {}), "phase": "observed", "action": Action.STOP.value,
                           "explanation": str(added[-1].content)})
    return held


def unknown_note(tool: str, action: Action) -> str:
    """What the model is told about a call the extractor cannot place (it gets ``unknown_tools``'s action)."""
    return (f" Forewarn's extractor cannot place the call to `{tool}`, so it cannot judge what the call does; "
            f"such calls get '{action.value}'.")


def not_run(call: Mapping[str, Any], text: str, data: dict[str, Any]) -> ToolMessage:
    return mark(ToolMessage(content=text, name=call["name"], tool_call_id=call["id"], status="error"),
                {"executed": False, **data})


def reflections(messages: Sequence[BaseMessage]) -> int:
    """Calls held back for reflection since the user's last message."""
    count = 0
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            break
        if isinstance(message, ToolMessage):
            data = forewarn_data(message)
            if data and data.get("action") == Action.REFLECT.value and "decision" in data:
                count += 1
    return count
