"""Guard single tools with ``langchain-core`` alone: ``guard_tool`` and ``ToolGuard``.

For agents that are not built with ``create_agent`` (a hand-written loop, a legacy
executor, another framework calling LangChain tools), each wrapped tool previews the
state its call would lead to before running, and records the state after::

    tools = ToolGuard(guard, user_messages=[task]).wrap_all([shell, send_email])

One :class:`ToolGuard` holds one run: the calls of all the tools it wrapped, so a secret
read through one tool and a send through another are seen together. On ``allow`` the
tool runs; on ``reflect`` it does not, and the agent gets the risk alert as the tool's
output; on ``ask_human`` the ``approver`` decides (without one, :class:`ApprovalRequired`
is raised); on ``stop``, :class:`RunStopped` is raised out of the agent.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .._extras import extra_error

try:
    from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import BaseTool
except ModuleNotFoundError as exc:
    raise extra_error("langchain", "forewarn.guard.langchain.tools", exc) from None

from ...errors import ForewarnError
from ..bundle_guard import BundleGuard
from ..judge import CallVerdict, judge_call
from ..policy import Policy
from ..runtime import Decision, Guard, Session
from ..spec import Action, Trigger
from ..thresholds import with_default_trigger
from ..toolcalls.extractor import ToolStateExtractor
from ..toolcalls.transcript import CallStatus, ExtractionError, ToolStep, Transcript
from . import _explain as explain
from ._messages import value_text
from .errors import ApprovalRequired, RunStopped

Extractor = Callable[[Transcript], Mapping[str, Any]]
Approver = Callable[[str, Any, Decision], "bool | Mapping[str, Any]"]
"""Asked on ``ask_human``: ``(tool, args, decision)`` → True (run it), False (do not) or
new arguments (run it with those)."""


class ToolGuard:
    """One guarded run over any number of tools.

    Args:
        guard: the guard.
        extractor: the state extractor (``ToolStateExtractor()`` when None).
        policy: overrides the guard's policy for this run.
        trigger: ``level`` or ``increase``; by default the policy's, else ``increase``, as for
            :class:`~guard.langchain.ForewarnMiddleware`.
        user_messages: what the user asked (consent to recipients and amounts).
        approver: decides ``ask_human`` calls; see :data:`Approver`.
        metadata: the run's context (predicates read it as ``meta``; a bundle picks its member by it).

    Attributes:
        session: the guard session of the run (its committed steps).
        transcript: what the tools did so far.
    """

    def __init__(self, guard: Guard | BundleGuard, *, extractor: Extractor | None = None,
                 policy: Policy | None = None, user_messages: Iterable[str] = (), approver: Approver | None = None,
                 metadata: Mapping[str, Any] | None = None, trigger: Trigger | str | None = None) -> None:
        self.guard = guard
        self.extractor: Extractor = extractor if extractor is not None else ToolStateExtractor()
        member = guard.for_metadata(metadata)  # a bundle's member, under its own policy
        effective = with_default_trigger(policy or member.policy, trigger)
        self.session: Session = member.session(None if effective == member.policy else effective, metadata=metadata)
        self.transcript = Transcript(user_messages=tuple(user_messages))
        self.approver = approver
        self._lock = threading.Lock()
        self.session.observe(self._state(self.transcript, None))

    def tell(self, user_message: str) -> None:
        """Add what the user said (for instance, a confirmation) to the run."""
        with self._lock:
            self.transcript = self.transcript.said(user_message)

    def check(self, name: str, args: Any, *, approved: bool = False) -> Decision:
        """The decision on a proposed call (a look-ahead; nothing is committed)."""
        return self.verdict(name, args, approved=approved).decision

    def verdict(self, name: str, args: Any, *, approved: bool = False) -> CallVerdict:
        """The verdict on a proposed call by the rule every integration judges by
        (:func:`forewarn.guard.judge.judge_call`: an approval covers one call); nothing is committed."""
        step = ToolStep(name, args, CallStatus.PROPOSED, approved=approved)
        reads = isinstance(self.extractor, ToolStateExtractor) and self.extractor.reads_only(name)
        with self._lock:
            return judge_call(self.session, self._state(self.transcript.then(step), step), name, args,
                              consequential=not reads)

    def record(self, name: str, args: Any, result: Any, *, error: bool = False, approved: bool = False) -> Decision:
        """Commit a call that ran, with its result; returns the decision on the new state."""
        status = CallStatus.ERROR if error else CallStatus.SUCCESS
        step = ToolStep(name, args, status, value_text(result), approved=approved)
        with self._lock:
            self.transcript = self.transcript.then(step)
            return self.session.observe(self._state(self.transcript, step), action={"tool": name, "args": args},
                                        approved=approved)

    def wrap(self, tool: BaseTool) -> GuardedTool:
        """The tool, guarded by this run."""
        return GuardedTool(name=tool.name, description=tool.description, args_schema=tool.args_schema,
                           return_direct=tool.return_direct, inner=tool, tool_guard=self)

    def wrap_all(self, tools: Sequence[BaseTool]) -> list[GuardedTool]:
        return [self.wrap(t) for t in tools]

    def _state(self, transcript: Transcript, step: ToolStep | None) -> Mapping[str, Any]:
        try:
            return self.extractor(transcript)
        except ForewarnError:
            raise
        except Exception as exc:  # a user's extractor: name the call it failed on
            raise ExtractionError(step.name if step else "<start>", step.args if step else None,
                                  f"the extractor raised {type(exc).__name__}: {exc}") from exc

    # -- the decision, acted on -------------------------------------------------------

    def _gate(self, name: str, args: Any) -> tuple[Any, bool, str | None]:
        """(arguments to run with or None, approved, text to return instead of running). Arguments the
        approver edits are judged again, as if the agent had proposed them: allowed, they run; in need
        of approval, the approver is asked about them; held back, they do not run."""
        edited = False
        while True:
            verdict = self.verdict(name, args)
            decision = verdict.decision
            if verdict.action is Action.ALLOW:
                return args, edited, None
            if verdict.action is Action.REFLECT:
                return None, False, explain.held_back(self.guard, decision, name, args)
            if verdict.action is Action.STOP:
                raise RunStopped(explain.stopped_before(self.guard, decision, name, args),
                                 tool=name, args=args, decision=decision)
            text = explain.approval_request(self.guard, decision, name, args)
            if self.approver is None:
                raise ApprovalRequired(text + " No approver is configured.", tool=name, args=args, decision=decision)
            answer = self.approver(name, args, decision)
            if answer is True:
                return args, True, None
            if not isinstance(answer, Mapping):
                return None, False, (f"The user rejected the call to {explain.describe_call(name, args)}. "
                                     f"It was not executed.")
            args, edited = dict(answer), True  # re-checked on the next turn of the loop


class GuardedTool(BaseTool):
    """A tool whose calls go through a :class:`ToolGuard` first (see the module docstring)."""

    inner: BaseTool
    tool_guard: Any  # ToolGuard (pydantic cannot build a schema for it)

    def _run(self, *args: Any, config: RunnableConfig, run_manager: CallbackManagerForToolRun | None = None,
             **kwargs: Any) -> Any:
        monitor: ToolGuard = self.tool_guard
        call_args = _arguments(args, kwargs)
        to_run, approved, instead = monitor._gate(self.name, call_args)
        if to_run is None:
            return instead
        try:
            result = self.inner.invoke(to_run, config=_child(config, run_manager))
        except Exception as exc:
            monitor.record(self.name, to_run, f"{type(exc).__name__}: {exc}", error=True, approved=approved)
            raise
        _after(monitor, self.name, to_run, result, approved)
        return result

    async def _arun(self, *args: Any, config: RunnableConfig,
                    run_manager: AsyncCallbackManagerForToolRun | None = None, **kwargs: Any) -> Any:
        monitor: ToolGuard = self.tool_guard
        call_args = _arguments(args, kwargs)
        to_run, approved, instead = monitor._gate(self.name, call_args)
        if to_run is None:
            return instead
        try:
            result = await self.inner.ainvoke(to_run, config=_child(config, run_manager))
        except Exception as exc:
            monitor.record(self.name, to_run, f"{type(exc).__name__}: {exc}", error=True, approved=approved)
            raise
        _after(monitor, self.name, to_run, result, approved)
        return result


def guard_tool(tool: BaseTool, guard: Guard, **options: Any) -> GuardedTool:
    """Guard one tool on its own run (``options`` as for :class:`ToolGuard`)."""
    return ToolGuard(guard, **options).wrap(tool)


def _after(monitor: ToolGuard, name: str, args: Any, result: Any, approved: bool) -> None:
    decision = monitor.record(name, args, result, approved=approved)
    if decision.action is Action.STOP:
        raise RunStopped(explain.after_call(monitor.guard, decision), tool=name, args=args, decision=decision)


def _arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if len(args) == 1 and not kwargs:  # a single-input tool called with a string
        return args[0]
    return dict(kwargs)


def _child(config: RunnableConfig, run_manager: CallbackManagerForToolRun | AsyncCallbackManagerForToolRun | None
           ) -> RunnableConfig:
    if run_manager is None:
        return config
    return {**config, "callbacks": run_manager.get_child()}

