"""A run under the middleware: its guard session, what the guard did, and its caches."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from forewarn.guard.langchain._messages import TranscriptCache
from forewarn.guard.runtime import Decision, Session
from forewarn.guard.spec import Action

__all__ = ["GuardedRun", "Intervention", "Outcome"]

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
    """A run under the middleware: its guard session and the interventions so far."""

    id: str
    session: Session
    interventions: list[Intervention] = field(default_factory=list)
    _transcripts: TranscriptCache = field(default_factory=TranscriptCache, repr=False)
    _verdicts: dict[str, Verdict] = field(default_factory=dict, repr=False)
    _proposals: dict[str, str] = field(default_factory=dict, repr=False)  # call id → the sidecar proposal it runs

    def _record(self, item: Intervention) -> None:
        # A tool node re-runs from its start when an interrupt is answered: one entry per call and phase.
        phase = item.outcome == "alerted"
        for i, old in enumerate(self.interventions):
            if old.tool_call_id == item.tool_call_id and (old.outcome == "alerted") == phase:
                self.interventions[i] = item
                return
        self.interventions.append(item)
