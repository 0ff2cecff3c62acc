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

This module is the class and its hooks; the parts they call on are their own modules: the
look-ahead over a model turn (``_lookahead``), asking a human (``_approval``), what follows
a tool's run (``_after_tool``), the runs kept (``runs``), the settings and their checks
(``_options``), and the sidecar (``_remote``). The concerns get a :class:`~._judge.Judge` (the
guard, the settings, the callables that read and decide a call, the run of a conversation, the
lock), never the middleware: the class is this file, and no concern imports it.
"""
from __future__ import annotations

import asyncio
import threading
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal

from .._extras import extra_error

try:
    from langchain.agents.middleware import AgentMiddleware
    from langchain.agents.middleware.types import ModelCallResult, ModelRequest, ModelResponse, ToolCallRequest
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
    from langgraph.errors import GraphBubbleUp
except ModuleNotFoundError as exc:
    raise extra_error("langchain", "forewarn.guard.langchain.middleware", exc) from None

from ...errors import ForewarnError
from ..bundle_guard import BundleGuard
from ..client import AsyncClient, Client, ServerError, SidecarUnreachable
from ..client._core import unreachable
from ..judge import CallVerdict, judge_call
from ..policy import Policy
from ..runtime import Decision, Guard, Session
from ..spec import Action, Trigger
from ..thresholds import warn_initial_crossings, with_default_trigger
from ..toolcalls.extractor import ToolStateExtractor
from ..toolcalls.placement import Placement, trained_tools
from ..toolcalls.transcript import ExtractionError, ToolStep, Transcript
from ._after_tool import ToolResult, aafter_tool, after_tool, stopped_after_tool
from ._approval import review_call, unless_forewarn_asks
from ._judge import Judge
from ._lookahead import Turn
from ._messages import REVIEWED
from ._options import Extractor, check_approvals, check_extractor, check_settings
from ._remote import MirroredSession, RemoteGuard, remote_guard
from .errors import UnknownToolWarning
from .review import REVIEW_TYPES, ReviewType
from .runs import GuardedRun, RunBook, Verdict, run_metadata

__all__ = ["ForewarnMiddleware"]


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
        unknown_tools: what a call the extractor cannot place gets when the guard would otherwise
            allow it: ``ask_human`` (the default), ``reflect`` or ``stop`` — or ``allow``, if you say
            so. Which calls are placed, for every form of extractor (a plain function included):
            :mod:`forewarn.guard.toolcalls.placement`.
        known_tools: tools to treat as placed whatever the extractor's output shows (for a plain
            function extractor: tools whose calls rightly change nothing in its state).
        read_only_tools: tools whose calls only read. An approval covers the one call a person
            approved: while the run stands where that call took it, any other call — another delete, the
            same call with other arguments — is judged as if the approval had not happened, except
            calls to these tools (:mod:`forewarn.guard.judge`). By default the read kinds of a
            ``ToolStateExtractor`` (``read_file``, ``http_get``, ``web_search``, ``email_read``).
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

    Warns (:class:`~forewarn.errors.ThresholdWarning`) when, under the level trigger, a
    threshold is already crossed where the learned runs' first calls led (of the pooled model,
    for a bundle): those first calls will be acted on.

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
                 known_tools: Sequence[str] | None = None, read_only_tools: Sequence[str] | None = None,
                 reflection_template: str | None = None, human_in_the_loop: Any = None,
                 approvals: Literal["interrupt", "sidecar"] = "interrupt", approval_timeout: float = 600.0) -> None:
        super().__init__()
        if isinstance(guard, (Client, AsyncClient)):  # on a sidecar: previews local, commits remote (_remote)
            guard = remote_guard(guard, model)
        check_approvals(approvals, approval_timeout, remote=isinstance(guard, RemoteGuard))
        self.approvals = approvals
        self._remote = isinstance(guard, RemoteGuard)
        self.approval_timeout = approval_timeout
        self.guard = guard
        self.extractor: Extractor = extractor if extractor is not None else ToolStateExtractor()
        self.policy = policy
        effective = with_default_trigger(policy or guard.policy, trigger)  # unset in spec and policy: increase
        # One guard for all sessions, so its per-abstract-state decision cache is shared.
        self._session_guard = guard if effective == guard.policy else guard.with_policy(effective)
        if policy is None and isinstance(guard, (BundleGuard, RemoteGuard)) and \
                isinstance(guard.local if isinstance(guard, RemoteGuard) else guard, BundleGuard):
            # a bundle's members keep their own thresholds, each with the trigger default
            self._session_guard = guard.with_member_policies(lambda p: with_default_trigger(p, trigger))
        # a look-ahead never acts on a run's initial state: the warning is about the states first calls lead to
        warn_initial_crossings(guard.model, effective, stacklevel=2, first_calls=True)
        session_guard = self._session_guard
        if isinstance(session_guard, Guard) and session_guard.start_warning:  # Guard.load's: warned just above
            if session_guard is guard:  # the caller's guard keeps its warning for its own sessions
                session_guard = session_guard.with_policy(effective)
            session_guard.start_warning = False
            self._session_guard = session_guard
        self.metadata = metadata
        settings = check_settings(max_reflections=max_reflections, on_reflection_limit=on_reflection_limit,
                                  on_extraction_error=on_extraction_error, allowed_decisions=allowed_decisions,
                                  unknown_tools=unknown_tools, reflection_template=reflection_template)
        self.max_reflections = settings.max_reflections
        self.on_reflection_limit = settings.on_reflection_limit
        self.on_extraction_error: Action | None = settings.on_extraction_error
        self.allowed_decisions: tuple[ReviewType, ...] = settings.allowed_decisions
        self.judge_unchanged = judge_unchanged
        self.unknown_tools = settings.unknown_tools
        self.reflection_template = settings.reflection_template
        self._warned: set[str] = set()
        self.read_only_tools = frozenset(read_only_tools or ())
        self.placement = Placement(self.extractor, trained=trained_tools(guard.model.provenance),
                                   known_tools=known_tools)
        self.max_runs = max_runs
        self._name = name
        self._lock = threading.RLock()
        self._runs = RunBook(self._lock)
        # what the look-ahead, approval and after-tool steps may use of the middleware (its bound methods: a
        # reference cycle, as the agent's graph already makes with the middleware; the collector frees both)
        self._judge = Judge(self._session_guard, settings, judge_unchanged, approvals, approval_timeout,
                            decide=self._decide, adecide=self._adecide, judge_call=self._judge_call,
                            extract=self._extract,
                            try_extract=self._try_extract, places=self.places, run_of=self._run_of, lock=self._lock)
        check_extractor(guard, self.extractor, metadata)
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
            config["when"] = unless_forewarn_asks(self._judge, config.get("when"))

    def knows(self, tool: str) -> bool:
        """Whether calls to ``tool`` are placed before any is seen (rules 1–3 of
        :mod:`~forewarn.guard.toolcalls.placement`; a tool only its calls can tell about counts as known)."""
        return self.placement.static(tool) is not False

    def places(self, tool: str, transcript: Transcript, step: ToolStep) -> bool:
        """Whether the extractor places this proposed call (``transcript`` ends with it); warns once
        per tool it does not place."""
        placed = self.placement.places(tool, lambda: self._extract(transcript, step),
                                       lambda: self._extract(Transcript(transcript.user_messages,
                                                                        transcript.steps[:-1],
                                                                        transcript.messages), None))
        if not placed:
            self.warn_unknown([tool], stacklevel=4, placed=lambda _: False)
        return placed

    def warn_unknown(self, tools: Sequence[str], *, stacklevel: int = 2,
                     placed: Callable[[str], bool] | None = None) -> list[str]:
        """Warn (once per name) about tools whose calls the extractor cannot place; returns them."""
        placed = placed or self.knows
        with self._lock:
            unknown = sorted({t for t in tools if not placed(t)} - self._warned)
            self._warned.update(unknown)
        if unknown:
            warnings.warn(f"Forewarn's extractor cannot place calls to the tools {unknown} (it does not know them, "
                          f"the model never saw them, or its state does not change with them), so it cannot see "
                          f"their effects; their calls get unknown_tools={self.unknown_tools.value!r}. Give them a "
                          f"kind (ToolStateExtractor(tool_kinds={{...}})), make your extractor reflect them, or "
                          f"list them in known_tools.", UnknownToolWarning, stacklevel=stacklevel + 1)
        return unknown

    @property
    def name(self) -> str:
        return self._name or type(self).__name__

    # -- runs ---------------------------------------------------------------------

    def get_run(self, run_id: str) -> GuardedRun | None:
        """The run with this id (the thread id, when the agent was invoked with one)."""
        return self._runs.get(run_id)

    @property
    def last_run(self) -> GuardedRun | None:
        """The run the middleware worked on most recently."""
        return self._runs.last

    def _run_of(self, messages: Sequence[BaseMessage]) -> GuardedRun:
        return self._runs.open(messages, keep=self.max_runs, extract=self._try_extract, end=self._end,
                               start=self._start)

    def _start(self) -> Session:
        session = self._session_guard.session(metadata=run_metadata(self.metadata))
        session.traced = False  # the look-ahead and the after-tool step record each decision's span, with its call
        return session

    def close(self, run_id: str | None = None) -> None:
        """End a run (by id: its thread id), or every run the middleware keeps: on a sidecar, their
        sessions are closed (pending approvals cancelled). The middleware closes a run's sidecar
        session by itself when the run ends — the model's final answer, a stop, or an error out of a
        hook (not an interrupt, which only pauses it); call this for runs you abandon mid-way, or at
        shutdown. A conversation that goes on after its run ended starts a new session."""
        runs = self._runs.runs() if run_id is None else [r for r in [self._runs.pop(run_id)] if r is not None]
        if run_id is None:
            self._runs.clear()
        for run in runs:
            self._end(run)

    def _end(self, run: GuardedRun) -> None:
        with self._lock:
            if run.closed:
                return
            run.closed = True
        end = getattr(run.session, "end", None)
        if end is not None:
            end()

    async def _aend(self, run: GuardedRun) -> None:
        """:meth:`_end` for the async hooks: the sidecar session is closed before the hook returns."""
        with self._lock:
            if run.closed:
                return
            run.closed = True
        aend = getattr(run.session, "aend", None)
        if aend is not None:
            await aend()

    def _ending(self, result: ModelCallResult[Any]) -> GuardedRun | None:
        """The run that ends with this model call's result: the final answer (no tool calls), on a sidecar
        (in process there is nothing to close: a run's session is memory only)."""
        if not self._remote:
            return None
        messages = result.result if isinstance(result, ModelResponse) else [result]
        last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
        return self._runs.current() if last is not None and not last.tool_calls else None

    def _ended(self, result: ModelCallResult[Any]) -> ModelCallResult[Any]:
        run = self._ending(result)
        if run is not None:
            self._end(run)
        return result

    async def _aended(self, result: ModelCallResult[Any]) -> ModelCallResult[Any]:
        run = self._ending(result)
        if run is not None:
            await self._aend(run)
        return result

    def _failing(self, exc: BaseException) -> GuardedRun | None:
        """A hook raised: the run ends there unless LangGraph is only pausing it (an interrupt), or a call
        did not run because the sidecar could not be reached (the run goes on when it is resumed, its
        session keeping the calls refused meanwhile for the sidecar)."""
        return (self._runs.current() if self._remote and not isinstance(exc, (GraphBubbleUp, SidecarUnreachable))
                else None)

    def _failed(self, exc: BaseException) -> None:
        run = self._failing(exc)
        if run is not None:
            self._end(run)

    async def _afailed(self, exc: BaseException) -> None:
        run = self._failing(exc)
        if run is not None:
            await self._aend(run)

    # -- hooks ----------------------------------------------------------------------

    def wrap_model_call(self, request: ModelRequest[Any],
                        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]) -> ModelCallResult[Any]:
        messages = request.state["messages"]
        stopped = stopped_after_tool(messages)
        if stopped is not None:
            return self._ended(stopped)
        self._check_tools(request)
        if self._remote:  # the run's sidecar session is created while the model thinks
            self._run_of(messages)
        try:
            return self._ended(self._look_ahead(messages, handler(request)))
        except BaseException as exc:
            self._failed(exc)
            raise

    async def awrap_model_call(self, request: ModelRequest[Any],
                               handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
                               ) -> ModelCallResult[Any]:
        messages = request.state["messages"]
        stopped = stopped_after_tool(messages)
        if stopped is not None:
            return await self._aended(stopped)
        self._check_tools(request)
        if self._remote:
            self._run_of(messages)
        try:
            return await self._aended(self._look_ahead(messages, await handler(request)))
        except BaseException as exc:
            await self._afailed(exc)
            raise

    def _check_tools(self, request: ModelRequest[Any]) -> None:
        # langchain types the tools BaseTool | dict; a bare name is tolerated all the same
        names = [t if isinstance(t, str) else getattr(t, "name", None)  # type: ignore[unreachable]
                 for t in request.tools or ()]
        if any(n is not None and n not in self._warned and not self.knows(n) for n in names):
            self.warn_unknown([n for n in names if n is not None], stacklevel=4)

    def wrap_tool_call(self, request: ToolCallRequest,
                       handler: Callable[[ToolCallRequest], ToolResult]) -> ToolResult:
        try:
            return self._tool_call(request, handler)
        except BaseException as exc:
            self._failed(exc)
            raise

    async def awrap_tool_call(self, request: ToolCallRequest,
                              handler: Callable[[ToolCallRequest], Awaitable[ToolResult]]) -> ToolResult:
        try:
            return await self._atool_call(request, handler)
        except BaseException as exc:
            await self._afailed(exc)
            raise

    def _tool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolResult]) -> ToolResult:
        run, verdict = self._verdict_for(request)
        if verdict is None or verdict.action is Action.ALLOW:
            self._reach(run, request)
            return after_tool(self._judge, run, request, handler(request), None)
        try:
            resolved = review_call(self._judge, run, request, verdict)
        except ServerError as exc:
            refused = self._unreached(run, request, exc)
            if refused is None:
                raise
            raise refused from exc
        if isinstance(resolved, ToolMessage):
            return resolved
        approved, review = resolved
        self._reach(run, approved)
        token = REVIEWED.set(approved.tool_call.get("id") or "")  # the recorder records the approval
        try:
            result = handler(approved)
        finally:
            REVIEWED.reset(token)
        return after_tool(self._judge, run, approved, result, review)

    async def _atool_call(self, request: ToolCallRequest,
                          handler: Callable[[ToolCallRequest], Awaitable[ToolResult]]) -> ToolResult:
        run, verdict = self._verdict_for(request)
        if verdict is None or verdict.action is Action.ALLOW:
            await self._areach(run, request)
            return await aafter_tool(self._judge, run, request, await handler(request), None)
        try:
            resolved = (await asyncio.to_thread(review_call, self._judge, run, request, verdict)
                        if self.approvals == "sidecar"  # a sidecar's approver may take minutes
                        else review_call(self._judge, run, request, verdict))
        except ServerError as exc:
            refused = self._unreached(run, request, exc)
            if refused is None:
                raise
            raise refused from exc
        if isinstance(resolved, ToolMessage):
            return resolved
        approved, review = resolved
        await self._areach(run, approved)
        token = REVIEWED.set(approved.tool_call.get("id") or "")
        try:
            result = await handler(approved)
        finally:
            REVIEWED.reset(token)
        return await aafter_tool(self._judge, run, approved, result, review)

    def _reach(self, run: GuardedRun, request: ToolCallRequest) -> None:
        """Fail closed: on a sidecar, the call runs only once the sidecar answered for it (previews are
        local: without this round trip, a call would run on a sidecar that is down and only its commit,
        after the tool, would find out). Raises :class:`SidecarUnreachable` when it did not answer."""
        if isinstance(run.session, MirroredSession):
            with self._lock:
                run.session.reach(request.tool_call["name"], request.tool_call["args"])

    def _unreached(self, run: GuardedRun, request: ToolCallRequest, exc: ServerError) -> SidecarUnreachable | None:
        """The error for a call whose approvers on the sidecar (``approvals="sidecar"``) could not be reached:
        it does not run, as when :meth:`_reach` fails. None for any other error (raised as it is)."""
        if not isinstance(run.session, MirroredSession) or isinstance(exc, SidecarUnreachable) or not unreachable(exc):
            return None
        with self._lock:
            return run.session.refuse(request.tool_call["name"], request.tool_call["args"], exc)

    async def _areach(self, run: GuardedRun, request: ToolCallRequest) -> None:
        """:meth:`_reach` for the async hooks: awaited on the agent's loop when the session was created there."""
        session = run.session
        if isinstance(session, MirroredSession):
            if session.acreating is None:  # created synchronously: its round trip in a worker thread
                await asyncio.to_thread(self._reach, run, request)
            else:
                await session.areach(request.tool_call["name"], request.tool_call["args"])

    # -- the look-ahead ---------------------------------------------------------------

    def _look_ahead(self, messages: Sequence[BaseMessage], response: ModelResponse[Any]) -> ModelCallResult[Any]:
        proposal = next((m for m in reversed(response.result) if isinstance(m, AIMessage)), None)
        if proposal is None or not proposal.tool_calls:
            return response
        run = self._run_of(messages)
        with self._lock:
            base = run.transcripts.transcript(messages)
            verdicts, added = Turn(self._judge, run, base, messages).judge(proposal)
            run.verdicts.update(verdicts)
        if not added:
            return response
        return ModelResponse(result=[*response.result, *added], structured_response=response.structured_response)

    def _verdict_for(self, request: ToolCallRequest) -> tuple[GuardedRun, Verdict | None]:
        messages = request.state["messages"]
        run = self._run_of(messages)
        call_id = request.tool_call.get("id") or ""
        with self._lock:
            verdict = run.verdicts.get(call_id)
            if verdict is None:  # judged in another process, or never: judge the turn again
                verdict = self._rejudge(run, messages, call_id)
            return run, verdict

    def _rejudge(self, run: GuardedRun, messages: Sequence[BaseMessage], call_id: str) -> Verdict | None:
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            if isinstance(message, AIMessage) and any(c["id"] == call_id for c in message.tool_calls):
                before = messages[:index]
                verdicts, _ = Turn(self._judge, run, run.transcripts.transcript(before), before, record=False).judge(message)
                run.verdicts.update(verdicts)
                # a call the turn holds back (reflect, stop) never reaches a tool node: ask instead
                return verdicts.get(call_id) or Verdict(Action.ASK_HUMAN, _unjudged(self, call_id))
        return None

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

    def reads_only(self, tool: str) -> bool:
        """Whether calls to ``tool`` only read (``read_only_tools``, or the extractor's read kinds)."""
        return tool in self.read_only_tools or (
            isinstance(self.extractor, ToolStateExtractor) and self.extractor.reads_only(tool))

    def _judge_call(self, session: Session, transcript: Transcript, step: ToolStep) -> CallVerdict:
        try:
            concrete = self._extract(transcript, step)
            return judge_call(session, concrete, step.name, step.args, consequential=not self.reads_only(step.name),
                              known=lambda: self.places(step.name, transcript, step), unknown_tools=self.unknown_tools,
                              judge_unchanged=self.judge_unchanged)
        except ForewarnError as exc:  # ExtractionError, or a PredicateError on the state
            if self.on_extraction_error is None:
                raise
            fallback = self._fallback(step.name, str(exc))
            return CallVerdict(fallback.action, fallback)

    def _decide(self, session: Session, transcript: Transcript, step: ToolStep, *, commit: bool) -> Decision:
        try:
            concrete = self._extract(transcript, step)
            action = {"tool": step.name, "args": step.args}
            if commit:  # a call a human approved says so in the run's record (the audit log, the recorder's trace)
                return session.observe(concrete, action=action | ({"approved": True} if step.approved else {}),
                                       approved=step.approved)
            return session.preview(concrete, action=action)
        except ForewarnError as exc:  # ExtractionError, or a PredicateError on the state
            if self.on_extraction_error is None or isinstance(exc, ServerError):  # (a sidecar's refusal is no misreading)
                raise
            return self._fallback(step.name, str(exc))

    async def _adecide(self, session: Session, transcript: Transcript, step: ToolStep) -> Decision:
        """:meth:`_decide` committing, for the async hooks: a sidecar's commit is awaited (``aobserve``)."""
        try:
            concrete = self._extract(transcript, step)
            action = {"tool": step.name, "args": step.args} | ({"approved": True} if step.approved else {})
            aobserve = getattr(session, "aobserve", None)
            if aobserve is not None:
                decided: Decision = await aobserve(concrete, action=action, approved=step.approved)
                return decided
            return session.observe(concrete, action=action, approved=step.approved)
        except ForewarnError as exc:
            if self.on_extraction_error is None or isinstance(exc, ServerError):
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

