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

from .._extras import require
from ..toolcalls.transcript import CallStatus, ExtractionError, StateExtractor, ToolStep, Transcript
from .errors import ApprovalRequired, GuardIntervention, RunStopped
from .review import Review, ReviewError, parse_review

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
    from ._messages import transcript_from_messages
    from ._options import Extractor
    from .middleware import ForewarnMiddleware
    from .recorder import TraceRecorder
    from .runs import GuardedRun, Intervention
    from .tools import Approver, GuardedTool, ToolGuard, guard_tool

# The transcript, review and error types above need no LangChain (the tool domain and the
# agent-log readers of the core use them). The rest is loaded when first asked for, once the
# langchain extra is there: the recorder and the tool guard need langchain-core, the
# middleware also langchain and langgraph.
_LAZY: dict[str, tuple[str, tuple[str, ...] | None]] = {
    "transcript_from_messages": ("_messages", ("langchain_core",)),
    "TraceRecorder": ("recorder", ("langchain_core",)),
    **{name: ("tools", ("langchain_core",)) for name in ("Approver", "GuardedTool", "ToolGuard", "guard_tool")},
    "ForewarnMiddleware": ("middleware", None),
    "Extractor": ("_options", None),
    **{name: ("runs", None) for name in ("GuardedRun", "Intervention")},
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, needs = _LAZY[name]
        require("langchain", f"forewarn.guard.langchain.{name}", needs)
        import importlib

        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
