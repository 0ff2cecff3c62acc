"""One MCP client session under the guard, and the verdict on one proposed ``tools/call``.

Pure of the protocol: a :class:`GuardedSession` holds what the session did (a
:class:`~forewarn.guard.toolcalls.Transcript`), its guard session and whether it was stopped;
:func:`judge` previews a proposed call on the state it would lead to — by
:func:`guard.judge.judge_call`, the rule the LangChain middleware and the sidecar judge by — and :meth:`GuardedSession.ran`
commits a call that ran. The proxy (``proxy.py``) does the I/O around them.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...errors import ForewarnError
from ..judge import APPROVED_ONCE_NOTE, Why, judge_call
from ..runtime import Decision, Session
from ..spec import Action
from ..toolcalls.extractor import ToolStateExtractor
from ..toolcalls.transcript import CallStatus, ToolStep, Transcript, describe_call
from .recording import SessionLog


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the proxy does with a proposed call: ``action`` (after the proxy's own rules) on ``decision``."""

    action: Action
    decision: Decision
    note: str = ""  # why the proxy's rules changed the guard's action (an unknown tool, an unreadable call)


class DecisionHook(Protocol):
    """Called once per judged call (the place for a ``forewarn.decision`` span or an audit line):
    the session's id, the tool, its arguments, the verdict."""

    def __call__(self, session_id: str, tool: str, args: Any, verdict: Verdict) -> None: ...


@dataclass
class GuardedSession:
    """One MCP client session: the calls that ran and the state they led to, its guard session, and
    whether it was stopped."""

    id: str
    session: Session | None  # None: recording only (no model), every call is allowed
    extractor: ToolStateExtractor
    steps: list[ToolStep] = field(default_factory=list)  # the calls that ran, oldest first
    state: Mapping[str, Any] = field(default_factory=dict)  # the extractor's state of those calls (never mutated)
    stopped: Verdict | None = None
    stopped_tools: set[str] = field(default_factory=set)  # the tools whose calls a stop was about (stops.py)
    log: SessionLog | None = None
    remote: Any = None  # the sidecar's AsyncRemoteSession, with --serve-url
    unsent: list[dict[str, Any]] = field(default_factory=list)  # steps that ran while the sidecar was down
    refused: list[dict[str, Any]] = field(default_factory=list)  # calls not run: the sidecar did not answer
    calls: int = 0
    initial: Mapping[str, Any] = field(default_factory=dict)  # the state before any call

    def __post_init__(self) -> None:
        if not self.state:
            self.state = self.extractor(self.transcript)

    @property
    def transcript(self) -> Transcript:
        """What the session did, as a transcript (the state is kept as it goes: nothing folds this on a call)."""
        return Transcript(steps=tuple(self.steps))

    def ran(self, step: ToolStep) -> tuple[Mapping[str, Any], Decision]:
        """Commit a call that ran: the state it led to, and the guard's decision there."""
        self.steps.append(step)
        state = self.state = self.extractor.then(self.state, step)
        decision = (_RECORDING if self.session is None
                    else self.session.observe(state, action={"tool": step.name, "args": step.args},
                                              approved=step.approved))
        if self.log is not None:
            self.log.add(state, step.name, step.args)
        return state, decision


def judge(guarded: GuardedSession, name: str, args: Any, *, unknown_tools: Action,
          fallback: Callable[[str, str], Decision]) -> tuple[Verdict, Mapping[str, Any] | None]:
    """The verdict on calling ``name`` with ``args`` next (:func:`guard.judge.judge_call`: the same rule
    as the LangChain middleware and the sidecar's proposals), and the state it would lead to (None when
    the call cannot be read: such a call is held back, never waved through)."""
    if guarded.session is None:
        return Verdict(Action.ALLOW, _RECORDING), None
    try:
        state = guarded.extractor.then(guarded.state, ToolStep(name, args, CallStatus.PROPOSED))
        judged = judge_call(guarded.session, state, name, args, consequential=not guarded.extractor.reads_only(name),
                            known=guarded.extractor.knows(name), unknown_tools=unknown_tools)
    except ForewarnError as exc:  # ExtractionError on the arguments, PredicateError on the state
        return Verdict(Action.REFLECT, fallback(name, str(exc)), " The call cannot be judged, so it did not run."), None
    note = ""
    if judged.why is Why.UNKNOWN_TOOL:  # never silently allowed
        note = (f" Forewarn's extractor does not know the tool `{name}`, so it cannot judge what the call does; "
                f"calls to unknown tools get '{unknown_tools.value}'.")
    elif judged.why is Why.APPROVED_ONCE:
        note = APPROVED_ONCE_NOTE
    return Verdict(judged.action, judged.decision, note), state


_RECORDING = Decision(Action.ALLOW, None, None, "", {}, "recording only: no model judges the calls", known=False)


# -- words -------------------------------------------------------------------------------------

def _risk(decision: Decision) -> str:
    if decision.p_unsafe is None:
        return decision.message or "its risk is unknown"
    return decision.message or f"the probability of a violation from there is {decision.p_unsafe:.1%}"


def held_back_text(name: str, args: Any, verdict: Verdict) -> str:
    """The tool result the model gets in place of a call held back (reflect)."""
    return (f"Forewarn held back the call {describe_call(name, args)}: it did not run. {_risk(verdict.decision)}"
            f"{verdict.note} Revise the plan and try a safer step.")


def stopped_text(name: str, verdict: Verdict, *, later: bool = False) -> str:
    """The error for a call refused because the guard stopped the session."""
    if later:
        return (f"Forewarn stopped this session earlier; the call to `{name}` was refused, as is every later "
                f"call of the session. {_risk(verdict.decision)}")
    return (f"Forewarn stopped this session before the call to `{name}`: it did not run, and every later call "
            f"of the session is refused. {_risk(verdict.decision)}{verdict.note}")


def approval_text(name: str, args: Any, verdict: Verdict) -> str:
    """What a human is asked (elicitation message, console proposal)."""
    return (f"Forewarn asks before the agent calls {describe_call(name, args)}. {_risk(verdict.decision)}"
            f"{verdict.note} Approve this call?")
