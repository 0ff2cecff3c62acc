"""Interventions that end an agent's run from inside a tool (LangChain without LangGraph).

These are not bad input, so they are not :class:`~forewarn.errors.ForewarnError` (a
``ValueError``): code that catches bad values must not swallow a stop.
"""
from __future__ import annotations

from typing import Any

from ...errors import ForewarnWarning
from ..runtime import Decision


class GuardIntervention(RuntimeError):
    """The guard stepped in before a tool call ran.

    Attributes:
        tool: the tool's name.
        args: the call's arguments.
        decision: the guard's decision, with its explanation in ``decision.message``.
    """

    def __init__(self, message: str, *, tool: str, args: Any, decision: Decision) -> None:
        super().__init__(message)
        self.message = message
        self.tool = tool
        self.args = args
        self.decision = decision

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class RunStopped(GuardIntervention):
    """The guard stopped the run: the call was too risky to make at all."""


class ApprovalRequired(GuardIntervention):
    """The call needs a human's approval and no approver was configured."""


class UnknownToolWarning(ForewarnWarning):
    """The agent has tools the extractor knows nothing about: the guard cannot see their effects, so
    their calls get the middleware's ``unknown_tools`` action (by default a human decides)."""
