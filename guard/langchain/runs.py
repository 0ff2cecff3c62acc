"""A run under the middleware: its guard session, what the guard did, and its caches; and the
book of the runs a middleware keeps.

Runs are kept in memory, by run id (the thread id, or the conversation's first message),
and survive interrupts and checkpointers. A run missing when it goes on (another process
resumed it, or it was dropped) is rebuilt from its messages (:meth:`RunBook.open`).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .._extras import extra_error

try:
    from langchain_core.messages import BaseMessage
    from langgraph.config import get_config
except ModuleNotFoundError as exc:
    raise extra_error("langchain", "forewarn.guard.langchain.runs", exc) from None

from ..runtime import Decision, Session
from ..spec import Action
from ..toolcalls.transcript import ToolStep, Transcript
from ._messages import TranscriptCache

Outcome = Literal["held back", "approved", "edited", "rejected", "stopped", "alerted"]


@dataclass(frozen=True, slots=True)
class Intervention:
    """One time the guard stepped in.

    Attributes:
        tool_call_id: the call's id.
        tool: the tool's name; ``args`` its arguments as the model proposed them.
        decision: the guard's decision (``decision.action`` is what the policy said).
        action: what the middleware did, which differs from the decision's action when
            the reflection limit was reached or the call could not be read.
        outcome: ``"held back"`` (reflect), ``"approved"``, ``"edited"``, ``"rejected"``,
            ``"stopped"``, or ``"alerted"`` (a risky state after a call that ran).
    """

    tool_call_id: str | None
    tool: str
    args: Any
    decision: Decision
    action: Action
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the look-ahead decided about one call that is let through to the tool node."""

    action: Action  # allow or ask_human
    decision: Decision
    description: str = ""


@dataclass
class GuardedRun:
    """A run under the middleware: its guard session and the interventions so far.

    Attributes:
        id: the run's id (the thread id, or the conversation's first message).
        session: the guard's session (on a sidecar, mirrored there).
        interventions: each time the guard stepped in (:meth:`record`).
        closed: the run ended (its sidecar session closed): a conversation that goes on starts anew.
        transcripts: the run's conversation read as a transcript, cached as it grows.
        verdicts: the look-ahead's verdicts on the calls let through that have not run yet, by call id.
        proposals: on a sidecar, the approved proposal each call id runs as.

    The middleware changes them under its lock.
    """

    id: str
    session: Session
    interventions: list[Intervention] = field(default_factory=list)
    closed: bool = False
    transcripts: TranscriptCache = field(default_factory=TranscriptCache, repr=False)
    verdicts: dict[str, Verdict] = field(default_factory=dict, repr=False)
    proposals: dict[str, str] = field(default_factory=dict, repr=False)

    def record(self, item: Intervention) -> None:
        """Add an intervention; one per call and phase (a tool node re-runs from its start when an
        interrupt is answered, and its record replaces the earlier one)."""
        phase = item.outcome == "alerted"
        for i, old in enumerate(self.interventions):
            if old.tool_call_id == item.tool_call_id and (old.outcome == "alerted") == phase:
                self.interventions[i] = item
                return
        self.interventions.append(item)


class RunBook:
    """The runs a middleware keeps, most recently used last; past ``keep`` the oldest is dropped.

    Shares the middleware's lock: a run's verdicts and records are changed under it too.
    """

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock
        self._runs: OrderedDict[str, GuardedRun] = OrderedDict()
        self._last: str | None = None

    def get(self, run_id: str) -> GuardedRun | None:
        with self._lock:
            return self._runs.get(run_id)

    @property
    def last(self) -> GuardedRun | None:
        with self._lock:
            return self._runs.get(self._last) if self._last is not None else None

    def runs(self) -> list[GuardedRun]:
        with self._lock:
            return list(self._runs.values())

    def current(self) -> GuardedRun | None:
        """The run of the thread being run now (None outside a run, or before its first step)."""
        run_id = _thread_id()
        with self._lock:
            return self._runs.get(run_id) if run_id is not None else None

    def clear(self) -> None:
        """Drop every run (as a process that did not see them: they are rebuilt when they go on)."""
        with self._lock:
            self._runs.clear()

    def pop(self, run_id: str) -> GuardedRun | None:
        with self._lock:
            return self._runs.pop(run_id, None)

    def open(self, messages: Sequence[BaseMessage], *, keep: int, start: Callable[[], Session],
             extract: Callable[[Transcript, ToolStep | None], Mapping[str, Any] | None],
             end: Callable[[GuardedRun], None] | None = None) -> GuardedRun:
        """The run these messages belong to; a new one gets a session from ``start`` and what the run
        did so far committed to it (``extract``: the concrete state, or None to skip one). A run dropped
        past ``keep`` is handed to ``end``."""
        run_id = _thread_id() or (f"run-{messages[0].id}" if messages and messages[0].id else "default")
        with self._lock:
            run = self._runs.get(run_id)
            if run is None or run.closed:
                self._runs.pop(run_id, None)
                run = self._runs[run_id] = GuardedRun(run_id, start())
                while len(self._runs) > keep:
                    _, dropped = self._runs.popitem(last=False)
                    if end is not None:
                        end(dropped)
                _replay(run, messages, extract)
            else:
                self._runs.move_to_end(run_id)
            self._last = run_id
            return run


def run_metadata(metadata: Mapping[str, Any] | Callable[[Mapping[str, Any]], Mapping[str, Any] | None] | None
                 ) -> Mapping[str, Any] | None:
    """The metadata of a run that starts now: the middleware's mapping, or its function of the run's
    LangGraph config ``metadata`` (by default that ``metadata`` itself)."""
    if isinstance(metadata, Mapping):
        return metadata
    try:
        config = get_config()
    except RuntimeError:  # outside a runnable context
        config = {}
    given = user_metadata(config)
    return metadata(given) if metadata is not None else given


# What LangGraph and LangSmith add to a run's config metadata on their own (its step, node, checkpoint,
# tracing provider): framework internals, not the run's context.
_INTERNAL_PREFIXES = ("langgraph_", "checkpoint_", "ls_", "__")
_INTERNAL_KEYS = frozenset({"checkpoint_ns", "checkpoint_id", "run_attempt", "task_id", "langgraph_version",
                            "revision_id", "thread_ts", "run_id", "graph_id", "assistant_id"})


def user_metadata(config: Mapping[str, Any]) -> dict[str, Any]:
    """The run's context as the user gave it: the thread id and the user's own metadata keys
    (``invoke(..., config={"metadata": {...}})``), never LangGraph's internal keys."""
    given = config.get("metadata") or {}
    out = {k: v for k, v in given.items() if k not in _INTERNAL_KEYS and not k.startswith(_INTERNAL_PREFIXES)}
    thread = (config.get("configurable") or {}).get("thread_id")
    if thread is not None:
        out["thread_id"] = str(thread)
    return out


def _replay(run: GuardedRun, messages: Sequence[BaseMessage],
            extract: Callable[[Transcript, ToolStep | None], Mapping[str, Any] | None]) -> None:
    """Commit what a run did so far to its fresh session: the initial state, then each
    call's (monitors need the whole history)."""
    done = run.transcripts.transcript(messages)
    for k in range(len(done.steps) + 1):
        step = done.steps[k - 1] if k else None
        concrete = extract(Transcript(done.user_messages, done.steps[:k]), step)
        if concrete is not None:
            run.session.observe(concrete, action=None if step is None else {"tool": step.name, "args": step.args},
                                approved=step is not None and step.approved)


def _thread_id() -> str | None:
    try:
        configurable = get_config().get("configurable", {})
    except RuntimeError:  # outside a runnable context
        return None
    thread = configurable.get("thread_id")
    return None if thread is None else str(thread)
