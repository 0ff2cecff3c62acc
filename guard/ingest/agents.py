"""Agent logs → contract runs, through the extractor a user guards with.

The LangChain, OpenTelemetry and LangGraph readers each turn a log into what the agent
did — the user's messages and its tool calls with their results — as a transcript, and
this module turns that into a run exactly as :class:`~guard.langchain.TraceRecorder`
does while the agent runs: the first step is the extractor's state before any tool
ran, and every call that ran adds the state the extractor makes of the run so far,
with ``{"tool", "args"}`` as the step's action. So the states learned from a log are
the states the middleware will guard.

The extractor is the tool domain's ``ToolStateExtractor()`` unless the user names
their own (``--extractor module:attribute``: a callable of a transcript, or a class or
factory that makes one when called without arguments).
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ...errors import ForewarnError, InputError, TraceError
from ..traces import Run

if TYPE_CHECKING:
    from ..toolcalls.transcript import ToolStep, Transcript

Extractor = Callable[["Transcript"], Mapping[str, Any]]


@dataclass(frozen=True)
class Call:
    """One tool call that ran: name, arguments, whether it failed, its output as text."""

    name: str
    args: Any
    error: bool = False
    result: str | None = None
    id: str | None = None
    t: float | None = None      # seconds since the run started, when the log has times
    field: str | None = None    # where in the record (for errors)
    approved: bool = False


@dataclass
class AgentLog:
    """What a log says one agent run did."""

    id: str
    source: str
    line: int | None
    user: list[str] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    steps: Sequence[ToolStep] | None = None  # a ready transcript's steps (LangGraph), instead of calls


def resolve_extractor(name: str | None) -> Extractor:
    """The extractor named on the command line (see the module docstring).

    Raises:
        ForewarnError: a name that does not resolve to a callable.
    """
    if name is None or name == "tools":
        from ..toolcalls.extractor import ToolStateExtractor

        return ToolStateExtractor()
    module_name, colon, attribute = name.partition(":")
    if not colon or not module_name or not attribute:
        raise InputError(f"--extractor: expected 'tools', 'household' or MODULE:NAME "
                            f"(e.g. mypkg.guarding:extractor), got {name!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(f"--extractor {name}: cannot import {module_name!r} ({exc})") from exc
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise InputError(f"--extractor {name}: {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if isinstance(target, type):
        try:
            target = target()
        except Exception as exc:  # a user's class
            raise InputError(f"--extractor {name}: calling it without arguments raised "
                                f"{type(exc).__name__}: {exc}") from exc
    if not callable(target):
        raise InputError(f"--extractor {name}: not callable (got {type(target).__name__})")
    return target  # type: ignore[no-any-return]


def to_run(log: AgentLog, extractor: Extractor, origin: str) -> Run:
    """The run a recorder would have written for this log (see the module docstring).

    Raises:
        TraceError: the extractor cannot read a call (names the record and the call).
    """
    from ..toolcalls.transcript import CallStatus, ToolStep, Transcript

    if log.steps is not None:
        tool_steps = list(log.steps)
        times: list[float | None] = [None] * len(tool_steps)
        fields: list[str | None] = [f"steps[{i}]" for i in range(len(tool_steps))]
    else:
        tool_steps = [ToolStep(c.name, c.args, CallStatus.ERROR if c.error else CallStatus.SUCCESS, c.result,
                               id=c.id, approved=c.approved) for c in log.calls]
        times = [c.t for c in log.calls]
        fields = [c.field for c in log.calls]
    transcript = Transcript(tuple(log.user))
    timed = any(t is not None for t in times)
    steps: list[dict[str, Any]] = [_step(log, extractor, transcript, None, None)]
    if timed:
        steps[0]["t"] = 0.0
    last = 0.0
    for step, t, where in zip(tool_steps, times, fields):
        transcript = transcript.then(step)
        entry = _step(log, extractor, transcript, step, where)
        entry["action"] = {"tool": step.name, "args": step.args}
        if timed:
            last = max(last, t if t is not None else last)  # a call without a time keeps the last one
            entry["t"] = round(last, 6)
        steps.append(entry)
    meta = {"source": origin, "ingested_from": origin, **log.meta}
    return Run(id=log.id, steps=steps, meta=meta, source=log.source, line=log.line or 0)


class _Reading(Protocol):
    """What :func:`agent_runs` reads of a format's ``Reading`` (:mod:`.formats` imports this module)."""

    @property
    def handle(self) -> Callable[[ForewarnError], None]: ...

    def agent_extractor(self) -> Extractor: ...


def agent_runs(logs: Iterator[AgentLog], reading: _Reading, origin: str) -> Iterator[Run]:
    """A format's agent logs as runs through the reading's extractor; a log it cannot read goes to
    ``reading.handle``."""
    extractor = reading.agent_extractor()
    for log in logs:
        try:
            yield to_run(log, extractor, origin)
        except TraceError as exc:
            reading.handle(exc)


def _step(log: AgentLog, extractor: Extractor, transcript: Transcript, step: ToolStep | None,
          where: str | None) -> dict[str, Any]:
    try:
        state = extractor(transcript)
    except ForewarnError as exc:
        raise TraceError(f"the extractor cannot read this call: {exc}", source=log.source, line=log.line,
                         field=where) from exc
    except Exception as exc:  # a user's extractor: its failure is about this record
        raise TraceError(f"the extractor raised {type(exc).__name__}: {exc}", source=log.source, line=log.line,
                         field=where) from exc
    if not isinstance(state, Mapping):
        raise TraceError(f"the extractor returned {type(state).__name__}, not a state object",
                         source=log.source, line=log.line, field=where)
    return {"state": dict(state)}
