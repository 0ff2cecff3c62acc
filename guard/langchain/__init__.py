"""Forewarn for LangChain: a middleware for ``create_agent``, a trace recorder, a tool guard.

::

    from langchain.agents import create_agent
    from forewarn.guard import Guard
    from forewarn.guard.langchain import ForewarnMiddleware

    agent = create_agent(model, tools, middleware=[ForewarnMiddleware(Guard.load("model.json"))],
                         checkpointer=InMemorySaver())   # a checkpointer, for approvals

:class:`TraceRecorder` (a callback handler) logs runs of any runnable agent in the trace
format to learn from; :func:`guard_tool` guards single tools with langchain-core alone.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from forewarn.guard.langchain._messages import transcript_from_messages
from forewarn.guard.langchain.errors import ApprovalRequired, GuardIntervention, RunStopped
from forewarn.guard.langchain.recorder import TraceRecorder
from forewarn.guard.langchain.review import Review, ReviewError, parse_review
from forewarn.guard.langchain.tools import Approver, GuardedTool, ToolGuard, guard_tool
from forewarn.guard.langchain.transcript import CallStatus, ExtractionError, StateExtractor, ToolStep, Transcript

__all__ = [
    "ApprovalRequired",
    "Approver",
    "CallStatus",
    "ExtractionError",
    "StateExtractor",
    "ToolStep",
    "Transcript",
    "Extractor",
    "ForewarnMiddleware",
    "GuardIntervention",
    "GuardedRun",
    "GuardedTool",
    "Intervention",
    "Review",
    "ReviewError",
    "RunStopped",
    "ToolGuard",
    "TraceRecorder",
    "guard_tool",
    "parse_review",
    "transcript_from_messages",
]

if TYPE_CHECKING:
    from forewarn.guard.langchain.middleware import Extractor, ForewarnMiddleware, GuardedRun, Intervention

# The middleware needs `langchain` and `langgraph`; the recorder and the tool guard need
# only `langchain-core`, so the middleware is imported when it is first asked for.
_MIDDLEWARE = frozenset({"Extractor", "ForewarnMiddleware", "GuardedRun", "Intervention"})


def __getattr__(name: str) -> Any:
    if name in _MIDDLEWARE:
        from forewarn.guard.langchain import middleware

        return getattr(middleware, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
