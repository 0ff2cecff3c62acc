"""``ForewarnMiddleware``: Forewarn in a LangChain 1.x agent (``create_agent``).

Where it acts in the ReAct loop:

* ``wrap_model_call`` — the look-ahead. When the model proposes tool calls, it previews,
  call by call, the state each would lead to (after the calls before it in the same
  turn) and acts on the guard's decision: ``allow``; ``reflect`` — the call is not
  executed, the model gets a risk alert in its place and plans again (at most
  ``max_reflections`` times per user message, then ``on_reflection_limit``); ``stop`` —
  nothing of the turn runs and the run ends with a message saying why. A call held
  back holds back the rest of its turn.
* ``wrap_tool_call`` — ``ask_human``: before a call that needs approval runs, a
  LangGraph ``interrupt`` whose payload explains the risk, answered with approve / edit
  / reject through ``Command(resume=...)`` (one interrupt per call, as LangChain's
  ``HumanInTheLoopMiddleware`` does in its ``per_call`` mode). After a tool ran, it
  commits the state the call led to; a risky result (content that turns out to hold a
  secret) gets a risk alert appended, and a ``stop`` there ends the run instead of the
  next model call.

The middleware adds no node to the agent's graph (a node costs LangGraph time on every
step) and keeps nothing in the graph state: what it needs is read from the messages,
and the messages it adds (or annotates) carry its marks (LangChain's notification
metadata, which chat model integrations do not send). Runs survive interrupts and
checkpointers; their sessions are kept per run (the thread id, or the conversation's
first message) for :meth:`ForewarnMiddleware.get_run`, and a session missing when a run
goes on (another process resumed it) is rebuilt from the messages.
"""
from __future__ import annotations

import asyncio
import threading
import warnings
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

from forewarn.guard._extras import extra_error

try:
    from langchain.agents.middleware import AgentMiddleware
    from langchain.agents.middleware.types import ModelCallResult, ModelRequest, ModelResponse, ToolCallRequest
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
    from langgraph.config import get_config
    from langgraph.types import Command, interrupt
except ModuleNotFoundError as exc:
    raise extra_error("langchain", "forewarn.guard.langchain.middleware", exc) from None

from forewarn.guard.bundle_guard import BundleGuard
from forewarn.guard.client import AsyncClient, Client
from forewarn.guard.errors import ConfigError, ForewarnError, PredicateError
from forewarn.guard.langchain import _explain as explain
from forewarn.guard.langchain._lookahead import Turn, not_run, recheck, same_state
from forewarn.guard.langchain._messages import forewarn_data, mark, message_text
from forewarn.guard.langchain._remote import MirroredSession, RemoteGuard, remote_guard, review_on_sidecar
from forewarn.guard.langchain.errors import UnknownToolWarning
from forewarn.guard.langchain.review import (
    REVIEW_TYPES,
    Review,
    ReviewError,
    ReviewType,
    parse_review,
    review_payload,
)
from forewarn.guard.langchain.runs import GuardedRun, Intervention, Outcome, Verdict
from forewarn.guard.langchain.transcript import CallStatus, ExtractionError, ToolStep, Transcript, default_extractor
from forewarn.guard.policy import Policy
from forewarn.guard.runtime import Decision, Guard, Session
from forewarn.guard.spec import Action, Trigger
from forewarn.guard.thresholds import warn_initial_crossings, with_default_trigger

__all__ = ["Extractor", "ForewarnMiddleware", "GuardedRun", "Intervention", "Outcome"]

Extractor = Callable[[Transcript], Mapping[str, Any]]
"""A state extractor: what the agent did so far → the concrete state the spec reads."""

ToolResult = ToolMessage | Command[Any]


class ForewarnMiddleware(AgentMiddleware[Any, Any, Any]):
    """Guard every step of a ``create_agent`` agent with a Forewarn model.

    Args:
        guard: the guard (a learned, checked model and its policy), or a
            :class:`~guard.client.Client` / :class:`~guard.client.AsyncClient` of a sidecar
            (``forewarn serve``): the same decisions, interrupts and messages, with every step
            committed to the sidecar's audit log (see :mod:`guard.langchain._remote`).
        extractor: what the agent did (a :class:`~domains.tools.Transcript`) → the
            concrete state the guard's spec reads; ``ToolStateExtractor()`` when None.
        policy: overrides the guard's thresholds and unseen-state action.
        max_reflections: reflections per user message; past it, ``on_reflection_limit``.
        on_reflection_limit: ``ask_human`` or ``stop`` (the default).
        on_extraction_error: ``"raise"`` (the default) raises the
            :class:`~domains.tools.ExtractionError` (or the ``PredicateError``) out of the
            agent; ``reflect``, ``ask_human`` or ``stop`` acts on an unreadable call as
            that. Never ``allow``: a call the guard cannot read is not waved through.
        allowed_decisions: what a reviewer may answer (approve, edit, reject).
        judge_unchanged: also act on calls that leave the watched (abstract) state as it
            is. By default they pass: the guard already spoke when a tool led the run
            into that state (its alert is in that tool's result), and judging again
            would hold back every harmless step taken in a risky state.
        max_runs: how many runs' sessions are kept for :meth:`get_run` (oldest dropped).
        name: the middleware's name (to use two of them in one agent).
        metadata: the run's context, which predicates read as ``meta`` and by which a
            bundle (:class:`~guard.bundle_guard.BundleGuard`) picks its member: a mapping
            for every run, or a function of the run's LangGraph config ``metadata``
            (default: that ``metadata`` itself, as passed in ``invoke(..., config=...)``).
        trigger: ``level`` or ``increase``; by default the policy's (the spec's
            ``guard.trigger``), and ``increase`` when neither sets one: a call that does not
            raise the run's risk by more than ``min_increase`` is never held back, so a run
            that starts risky is not reflected on every harmless call.
        model: with a client, the sidecar's model to use (default: the server's default).
        tools: the agent's tools (or their names), to warn now about those the extractor does not
            know; without it, the warning comes on the agent's first model call.
        unknown_tools: what a call to a tool the extractor does not know gets when the guard
            would otherwise allow it: ``ask_human`` (the default), ``reflect`` or ``stop`` — or
            ``allow``, if you say so. (An extractor without a ``knows(name)`` method knows every tool.)
        human_in_the_loop: LangChain's ``HumanInTheLoopMiddleware`` used in the same agent: a call
            both would interrupt is asked once, by Forewarn (see :meth:`cover`).
        approvals: who is asked about a call that needs approval: ``interrupt`` (the default) — the
            graph's interrupt, answered with ``Command(resume=...)``; ``sidecar`` (with a client) —
            the sidecar's approvers (its console): a pending proposal the tool node waits on
            (up to ``approval_timeout`` seconds, then the call does not run).
        reflection_template: the text the model gets in place of a held-back call
            (``str.format`` fields in :data:`guard.langchain._explain.DEFAULT_REFLECTION`'s doc):
            by default plain words — the probability and what to avoid; the raw CEL condition
            and PCTL property only where a template asks for ``{unsafe}`` or ``{formula}``.

    Warns (:class:`~guard.errors.ThresholdWarning`) when, under the level trigger, a
    threshold is already crossed in an initial state (of the pooled model, for a bundle).

    Raises:
        ConfigError: for a setting out of range.
        PredicateError: an extractor whose initial state the guard's predicates cannot read.
    """

    def __init__(self, guard: Guard | BundleGuard | Client | AsyncClient | RemoteGuard, *, extractor: Extractor | None = None,
                 policy: Policy | None = None,
                 max_reflections: int = 2, on_reflection_limit: Action | str = Action.STOP,
                 on_extraction_error: Action | Literal["raise"] | str = "raise",
                 allowed_decisions: Sequence[ReviewType] = REVIEW_TYPES, judge_unchanged: bool = False,
                 max_runs: int = 1024, name: str | None = None,
                 metadata: Mapping[str, Any] | Callable[[Mapping[str, Any]], Mapping[str, Any] | None] | None = None,
                 trigger: Trigger | str | None = None, model: str | None = None,
                 tools: Sequence[Any] | None = None, unknown_tools: Action | str = Action.ASK_HUMAN,
                 reflection_template: str | None = None, human_in_the_loop: Any = None,
                 approvals: Literal["interrupt", "sidecar"] = "interrupt", approval_timeout: float = 600.0) -> None:
        super().__init__()
        if isinstance(guard, (Client, AsyncClient)):  # on a sidecar: previews local, commits remote (_remote)
            guard = remote_guard(guard, model)
        if approvals not in ("interrupt", "sidecar") or (approvals == "sidecar" and not isinstance(guard, RemoteGuard)):
            raise ConfigError(f"approvals={approvals!r}: expected 'interrupt', or 'sidecar' with a Client or "
                              f"AsyncClient of a sidecar as the guard")
        if not approval_timeout > 0:
            raise ConfigError(f"approval_timeout={approval_timeout!r} must be a positive number of seconds")
        self.approvals = approvals
        self._remote = isinstance(guard, RemoteGuard)
        self.approval_timeout = approval_timeout
        self.guard = guard
        self.extractor: Extractor = extractor if extractor is not None else default_extractor()
        self.policy = policy
        effective = with_default_trigger(policy or guard.policy, trigger)  # unset in spec and policy: increase
        # One guard for all sessions, so its per-abstract-state decision cache is shared.
        self._session_guard = guard if effective == guard.policy else guard.with_policy(effective)
        warn_initial_crossings(guard.model, effective, stacklevel=2)
        self.metadata = metadata
        if max_reflections < 0:
            raise ConfigError(f"max_reflections={max_reflections!r} must be 0 or more")
        self.max_reflections = max_reflections
        limit = Action(on_reflection_limit)
        if limit not in (Action.ASK_HUMAN, Action.STOP):
            raise ConfigError(f"on_reflection_limit={limit.value!r}: expected 'ask_human' or 'stop'")
        self.on_reflection_limit = limit
        self.on_extraction_error: Action | None = None
        if on_extraction_error != "raise":
            fallback = Action(on_extraction_error)
            if fallback is Action.ALLOW:
                raise ConfigError("on_extraction_error='allow' would wave through calls the guard cannot read; "
                                  "use 'raise', 'reflect', 'ask_human' or 'stop'")
            self.on_extraction_error = fallback
        unknown = [d for d in allowed_decisions if d not in REVIEW_TYPES]
        if unknown or not allowed_decisions:
            raise ConfigError(f"allowed_decisions={list(allowed_decisions)!r}: choose from {list(REVIEW_TYPES)}")
        self.allowed_decisions: tuple[ReviewType, ...] = tuple(allowed_decisions)
        self.judge_unchanged = judge_unchanged
        self.unknown_tools = Action(unknown_tools)
        if reflection_template is not None:
            explain.check_template(reflection_template)
        self.reflection_template = reflection_template
        self._warned: set[str] = set()
        self.max_runs = max_runs
        self._name = name
        self._runs: OrderedDict[str, GuardedRun] = OrderedDict()
        self._lock = threading.RLock()
        self._last: str | None = None
        # Fail now, not mid-run, if the extractor and the spec do not fit together (the run's metadata
        # is known only when a run starts: a field missing there is checked then).
        try:
            given = metadata if isinstance(metadata, Mapping) else None
            guard.predicates.evaluate(self.extractor(Transcript()), given)
        except PredicateError as exc:
            if exc.where != "meta" or isinstance(metadata, Mapping):
                raise
        if tools is not None:
            self.warn_unknown([t if isinstance(t, str) else t.name for t in tools], stacklevel=3)
        if human_in_the_loop is not None:
            self.cover(human_in_the_loop)

    def cover(self, hitl: Any) -> None:
        """Make LangChain's ``HumanInTheLoopMiddleware`` skip the calls Forewarn itself asks a human
        about, so one decision covers a call both would interrupt (Forewarn's interrupt has the same
        shape, plus the risk). Calls only ``hitl`` gates are still asked by it. Works in its batched
        and per-call modes and either order in ``middleware=[...]``: ``when`` predicates are
        wrapped, and Forewarn's look-ahead (inside the model call) has judged the call by then."""
        for config in hitl.interrupt_on.values():
            config["when"] = self._unless_forewarn_asks(config.get("when"))

    def _unless_forewarn_asks(self, original: Callable[[ToolCallRequest], bool] | None
                              ) -> Callable[[ToolCallRequest], bool]:
        def when(request: ToolCallRequest) -> bool:
            if self._will_ask(request):
                return False
            return True if original is None else bool(original(request))
        return when

    def _will_ask(self, request: ToolCallRequest) -> bool:
        call_id = request.tool_call.get("id")
        messages = (request.state or {}).get("messages")
        if not call_id or not messages:
            return False
        run = self._run_of(messages)
        with self._lock:
            verdict = run._verdicts.get(call_id)
        return verdict is not None and verdict.action is Action.ASK_HUMAN

    def knows(self, tool: str) -> bool:
        knows = getattr(self.extractor, "knows", None)
        return knows is None or bool(knows(tool))

    def warn_unknown(self, tools: Sequence[str], *, stacklevel: int = 2) -> list[str]:
        """Warn (once per name) about tools the extractor does not know; returns them."""
        with self._lock:
            unknown = sorted({t for t in tools if not self.knows(t)} - self._warned)
            self._warned.update(unknown)
        if unknown:
            warnings.warn(f"Forewarn's extractor does not know the tools {unknown}, so it cannot see their effects; "
                          f"their calls get unknown_tools={self.unknown_tools.value!r}. Give them a kind "
                          f"(ToolStateExtractor(tool_kinds={{...}})) to judge them.", UnknownToolWarning,
                          stacklevel=stacklevel + 1)
        return unknown

    def unknown_note(self, tool: str) -> str:
        return (f" Forewarn's extractor does not know the tool `{tool}`, so it cannot judge what the call does; "
                f"calls to unknown tools get '{self.unknown_tools.value}'.")

    @property
    def name(self) -> str:
        return self._name or type(self).__name__

    # -- runs ---------------------------------------------------------------------

    def get_run(self, run_id: str) -> GuardedRun | None:
        """The run with this id (the thread id, when the agent was invoked with one)."""
        with self._lock:
            return self._runs.get(run_id)

    @property
    def last_run(self) -> GuardedRun | None:
        """The run the middleware worked on most recently."""
        with self._lock:
            return self._runs.get(self._last) if self._last is not None else None

    def _run_of(self, messages: Sequence[BaseMessage]) -> GuardedRun:
        run_id = _thread_id() or (f"run-{messages[0].id}" if messages and messages[0].id else "default")
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                run = self._runs[run_id] = GuardedRun(run_id, self._session_guard.session(metadata=self._metadata()))
                while len(self._runs) > self.max_runs:
                    self._runs.popitem(last=False)
                self._replay(run, messages)
            else:
                self._runs.move_to_end(run_id)
            self._last = run_id
            return run

    def _metadata(self) -> Mapping[str, Any] | None:
        """The metadata of a run that starts now."""
        if isinstance(self.metadata, Mapping):
            return self.metadata
        try:
            given = get_config().get("metadata") or {}
        except RuntimeError:  # outside a runnable context
            given = {}
        return self.metadata(given) if self.metadata is not None else dict(given)

    def _replay(self, run: GuardedRun, messages: Sequence[BaseMessage]) -> None:
        """Commit what a run did so far to its fresh session: the initial state, then each
        call's (monitors need the whole history)."""
        done = run._transcripts.transcript(messages)
        for k in range(len(done.steps) + 1):
            step = done.steps[k - 1] if k else None
            concrete = self._try_extract(Transcript(done.user_messages, done.steps[:k]), step)
            if concrete is not None:
                run.session.observe(concrete, action=None if step is None else {"tool": step.name, "args": step.args})

    # -- hooks ----------------------------------------------------------------------

    def wrap_model_call(self, request: ModelRequest[Any],
                        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]) -> ModelCallResult[Any]:
        messages = request.state["messages"]
        stopped = _stopped_after_tool(messages)
        if stopped is not None:
            return stopped
        self._check_tools(request)
        if self._remote:  # the run's sidecar session is created while the model thinks
            self._run_of(messages)
        return self._look_ahead(messages, handler(request))

    async def awrap_model_call(self, request: ModelRequest[Any],
                               handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
                               ) -> ModelCallResult[Any]:
        messages = request.state["messages"]
        stopped = _stopped_after_tool(messages)
        if stopped is not None:
            return stopped
        self._check_tools(request)
        if self._remote:
            self._run_of(messages)
        return self._look_ahead(messages, await handler(request))

    def _check_tools(self, request: ModelRequest[Any]) -> None:
        # langchain types the tools BaseTool | dict; a bare name is tolerated all the same
        names = [t if isinstance(t, str) else getattr(t, "name", None)  # type: ignore[unreachable]
                 for t in request.tools or ()]
        if any(n is not None and n not in self._warned and not self.knows(n) for n in names):
            self.warn_unknown([n for n in names if n is not None], stacklevel=4)

    def wrap_tool_call(self, request: ToolCallRequest,
                       handler: Callable[[ToolCallRequest], ToolResult]) -> ToolResult:
        run, verdict = self._verdict_for(request)
        if verdict is None or verdict.action is Action.ALLOW:
            return self._after_tool(run, request, handler(request), None)
        resolved = self._review(run, request, verdict)
        if isinstance(resolved, ToolMessage):
            return resolved
        return self._after_tool(run, resolved[0], handler(resolved[0]), resolved[1], resolved[2])

    async def awrap_tool_call(self, request: ToolCallRequest,
                              handler: Callable[[ToolCallRequest], Awaitable[ToolResult]]) -> ToolResult:
        run, verdict = self._verdict_for(request)
        if verdict is None or verdict.action is Action.ALLOW:
            return self._after_tool(run, request, await handler(request), None)
        resolved = (await asyncio.to_thread(self._review, run, request, verdict) if self.approvals == "sidecar"
                    else self._review(run, request, verdict))  # a sidecar's approver may take minutes
        if isinstance(resolved, ToolMessage):
            return resolved
        return self._after_tool(run, resolved[0], await handler(resolved[0]), resolved[1], resolved[2])

    # -- the look-ahead ---------------------------------------------------------------

    def _look_ahead(self, messages: Sequence[BaseMessage], response: ModelResponse[Any]) -> ModelCallResult[Any]:
        proposal = next((m for m in reversed(response.result) if isinstance(m, AIMessage)), None)
        if proposal is None or not proposal.tool_calls:
            return response
        run = self._run_of(messages)
        with self._lock:
            base = run._transcripts.transcript(messages)
            verdicts, added = Turn(self, run, base, messages).judge(proposal)
            run._verdicts.update(verdicts)
        if not added:
            return response
        return ModelResponse(result=[*response.result, *added], structured_response=response.structured_response)

    def _verdict_for(self, request: ToolCallRequest) -> tuple[GuardedRun, Verdict | None]:
        messages = request.state["messages"]
        run = self._run_of(messages)
        call_id = request.tool_call.get("id") or ""
        with self._lock:
            verdict = run._verdicts.get(call_id)
            if verdict is None:  # judged in another process, or never: judge the turn again
                verdict = self._rejudge(run, messages, call_id)
            return run, verdict

    def _rejudge(self, run: GuardedRun, messages: Sequence[BaseMessage], call_id: str) -> Verdict | None:
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            if isinstance(message, AIMessage) and any(c["id"] == call_id for c in message.tool_calls):
                before = messages[:index]
                verdicts, _ = Turn(self, run, run._transcripts.transcript(before), before, record=False).judge(message)
                run._verdicts.update(verdicts)
                # a call the turn holds back (reflect, stop) never reaches a tool node: ask instead
                return verdicts.get(call_id) or Verdict(Action.ASK_HUMAN, _unjudged(self, call_id))
        return None

    # -- approval -----------------------------------------------------------------------

    def _review(self, run: GuardedRun, request: ToolCallRequest,
                verdict: Verdict) -> tuple[ToolCallRequest, Review, Decision] | ToolMessage:
        """Ask a human about the call; an edited call is judged again, as if the model had proposed it
        (allowed: it runs; needs approval: the human is asked about the edited call; held back: it
        does not run), and an edit the guard cannot read is asked again with the error."""
        decision, description, edit, error = verdict.decision, verdict.description, None, None
        proposal: str | None = None  # on a sidecar: the proposal the human answered
        while True:
            call = request.tool_call
            state = self._state_of(run, request) if self.approvals == "sidecar" else None
            if state is not None:  # (a call the guard cannot read is asked through the interrupt)
                review, proposal = self._ask_sidecar(run, request, state, edit_of=proposal if edit else None)
            else:
                payload = review_payload(call["name"], call["args"], call.get("id"), description, decision,
                                         self.allowed_decisions)
                review = self._ask(request, payload if error is None else {**payload, "forewarn_error": error})
            if review.type == "reject":
                with self._lock:
                    run._verdicts.pop(call.get("id") or "", None)
                    run._record(Intervention(call.get("id"), call["name"], call["args"], decision, Action.ASK_HUMAN,
                                             "rejected"))
                reason = f" The user's reason: {review.message}" if review.message else ""
                text = (f"The user rejected the call to {explain.describe_call(call['name'], call['args'])}; it "
                        f"was not executed.{reason} Do not retry it unless the user asks for it.")
                return not_run(call, text, {"action": "reject", "decision": decision.to_dict()})
            if review.type == "approve":
                with self._lock:
                    run._record(Intervention(call.get("id"), call["name"], call["args"], decision, Action.ASK_HUMAN,
                                             "approved" if edit is None else "edited"))
                    if proposal is not None:
                        run._proposals[call.get("id") or ""] = proposal
                return request, edit or review, decision
            name = review.name or call["name"]
            tool = request.tool if name == call["name"] else next(t for t in request.runtime.tools if t.name == name)
            # langgraph's override() types `tool` as BaseTool though the request's own field may be None
            edited = request.override(tool_call={**call, "name": name, "args": review.args or {}},
                                      tool=tool)  # type: ignore[arg-type]
            with self._lock:
                run._record(Intervention(call.get("id"), call["name"], call["args"], decision, Action.ASK_HUMAN,
                                         "edited"))
                try:
                    again = recheck(self, run, edited.tool_call, request.state["messages"])
                except ForewarnError as exc:  # unreadable: the reviewer answers again, nothing ran
                    error = f"Forewarn cannot read the edited call: {exc}. Nothing ran; answer again."
                    continue
            if isinstance(again, ToolMessage):
                return again
            request, edit, error = edited, review, None
            if again.action is Action.ALLOW:
                if proposal is not None:  # the edit, re-checked, is recorded on the sidecar too
                    self._propose_allowed(run, request, proposal)
                return request, review, again.decision
            decision, description = again.decision, again.description  # still needs approval: ask about the edit

    def _state_of(self, run: GuardedRun, request: ToolCallRequest) -> Mapping[str, Any] | None:
        """The state the call would lead to (None when the guard cannot read it)."""
        call = request.tool_call
        step = ToolStep(call["name"], call["args"], CallStatus.PROPOSED, id=call.get("id"))
        try:
            with self._lock:
                return self._extract(run._transcripts.transcript(request.state["messages"]).then(step), step)
        except ForewarnError:
            return None

    def _ask_sidecar(self, run: GuardedRun, request: ToolCallRequest, state: Mapping[str, Any], *,
                     edit_of: str | None) -> tuple[Review, str]:
        """Ask the sidecar's approvers (its console) and wait; an answer this agent does not allow is a rejection."""
        assert isinstance(run.session, MirroredSession)
        tools = sorted(t.name for t in request.runtime.tools)
        review, proposal = review_on_sidecar(run.session, request.tool_call, state, tools, edit_of=edit_of,
                                             timeout=self.approval_timeout)
        if review.type not in self.allowed_decisions:
            review = Review("reject", message=f"the approver answered {review.type!r}, which this agent does not "
                                              f"allow (allowed: {', '.join(self.allowed_decisions)})")
        return review, proposal

    def _propose_allowed(self, run: GuardedRun, request: ToolCallRequest, edit_of: str) -> None:
        assert isinstance(run.session, MirroredSession)
        state = self._state_of(run, request)
        if state is None:
            return
        call = request.tool_call
        allowed = run.session.remote.propose(call["name"], call["args"], state, ask=False, edit_of=edit_of,
                                             tools=sorted(t.name for t in request.runtime.tools))
        with self._lock:
            run._proposals[call.get("id") or ""] = allowed["id"]

    def _ask(self, request: ToolCallRequest, payload: dict[str, Any]) -> Review:
        """Interrupt until the answer is one Forewarn can act on: a mistyped answer (``{"type":
        "approved"}``) or an edit to a tool the agent lacks re-asks with the error in the payload
        (``forewarn_error``), instead of failing the thread on every later resume."""
        call = request.tool_call
        while True:
            answer = interrupt(payload)
            try:
                review = parse_review(answer, self.allowed_decisions)
                name = review.name or call["name"]
                if review.type == "edit" and name != call["name"] and not any(
                        t.name == name for t in request.runtime.tools):
                    names = ", ".join(sorted(t.name for t in request.runtime.tools))
                    raise ReviewError(f"the reviewer edited call {call.get('id')!r} to tool {name!r}, which the "
                                      f"agent does not have; its tools: {names}")
                return review
            except ValueError as exc:
                payload = {**payload, "forewarn_error": f"{exc}. Nothing ran; answer again."}

    # -- after a tool ran -------------------------------------------------------------

    def _after_tool(self, run: GuardedRun, request: ToolCallRequest, result: ToolResult,
                    review: Review | None, approved_decision: Decision | None = None) -> ToolResult:
        call = request.tool_call
        message = result if isinstance(result, ToolMessage) else _tool_message_in(result, call.get("id"))
        text = message_text(message.content) if message is not None else None
        error = message is not None and message.status == "error"
        approved = review is not None
        step = ToolStep(call["name"], call["args"], CallStatus.ERROR if error else CallStatus.SUCCESS, text,
                        id=call.get("id"), approved=approved)
        with self._lock:
            run._verdicts.pop(call.get("id") or "", None)
            if isinstance(run.session, MirroredSession):  # the step a sidecar proposal led to, linked to it
                run.session.proposal = run._proposals.pop(call.get("id") or "", None)
            transcript = run._transcripts.transcript(request.state["messages"]).then(step)
            before = run.session.history[-1] if run.session.history else None
            decision = self._decide(run.session, transcript, step, commit=True)
        news = decision.action is not Action.ALLOW and not (
            not self.judge_unchanged and decision.action is not Action.STOP and before is not None
            and before.action is not None and same_state(before.decision, decision)) and not (
            # a human approved exactly this: the result showed nothing the approval did not cover
            review is not None and review.type == "approve" and approved_decision is not None
            and decision.action is not Action.STOP and same_state(approved_decision, decision))
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
            words = explain.after_call(self._session_guard, decision)
            marks.update(action=decision.action.value, explanation=words, decision=decision.to_dict())
            notes.append(words)
            with self._lock:
                run._record(Intervention(call.get("id"), call["name"], call["args"], decision, decision.action,
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

    # -- states and decisions ---------------------------------------------------------

    def _extract(self, transcript: Transcript, step: ToolStep | None) -> Mapping[str, Any]:
        """The concrete state; a user's extractor failing is an ExtractionError naming the call."""
        try:
            return self.extractor(transcript)
        except ForewarnError:
            raise
        except Exception as exc:
            name = step.name if step is not None else "<no call>"
            raise ExtractionError(name, step.args if step is not None else None,
                                  f"the extractor raised {type(exc).__name__}: {exc}") from exc

    def _try_extract(self, transcript: Transcript, step: ToolStep | None) -> Mapping[str, Any] | None:
        """As :meth:`_extract`, or None where a fallback action is configured (for states that
        are only recorded: the fallback acts where a call is judged)."""
        try:
            return self._extract(transcript, step)
        except ForewarnError:
            if self.on_extraction_error is None:
                raise
            return None

    def _decide(self, session: Session, transcript: Transcript, step: ToolStep, *, commit: bool) -> Decision:
        try:
            concrete = self._extract(transcript, step)
            if commit:
                return session.observe(concrete, action={"tool": step.name, "args": step.args})
            return session.preview(concrete)
        except ForewarnError as exc:  # ExtractionError, or a PredicateError on the state
            if self.on_extraction_error is None:
                raise
            return self._fallback(step.name, str(exc))

    def _fallback(self, tool: str, reason: str) -> Decision:
        assert self.on_extraction_error is not None
        return Decision(self.on_extraction_error, None, None, self.guard.property, {},
                        f"Forewarn cannot read the call to `{tool}` ({reason}), so it cannot judge its risk; "
                        f"the configured action for such calls is '{self.on_extraction_error.value}'.",
                        known=False)


def _unjudged(middleware: ForewarnMiddleware, call_id: str) -> Decision:
    return Decision(Action.ASK_HUMAN, None, None, middleware.guard.property, {},
                    f"Forewarn held back call {call_id!r} when the model proposed it; it reached a tool anyway, so "
                    f"a human decides.", known=False)


def _thread_id() -> str | None:
    try:
        configurable = get_config().get("configurable", {})
    except RuntimeError:  # outside a runnable context
        return None
    thread = configurable.get("thread_id")
    return None if thread is None else str(thread)


def _stopped_after_tool(messages: Sequence[BaseMessage]) -> AIMessage | None:
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
