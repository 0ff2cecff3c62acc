"""Tool-call state: what an agent did with its tools, and the concrete state the guard reads.

Neutral ground that every integration imports (the LangChain middleware, the MCP proxy,
ingest, the sidecar, the tools domain); it imports no framework. ``transcript`` holds the
types (:class:`Transcript`, :class:`ToolStep`, :class:`CallStatus`, the extractor protocol and
its error), ``kinds`` the tool kinds and how their arguments are classed, ``extractor`` the
default extractor, :class:`ToolStateExtractor`.
"""
from __future__ import annotations

from .extractor import ToolStateExtractor, initial_state, violations
from .kinds import DEFAULT_INTERNAL_DOMAINS, DEFAULT_TOOL_KINDS, ToolKind
from .transcript import CallStatus, ExtractionError, StateExtractor, ToolStep, Transcript

__all__ = [
    "DEFAULT_INTERNAL_DOMAINS",
    "DEFAULT_TOOL_KINDS",
    "CallStatus",
    "ExtractionError",
    "StateExtractor",
    "ToolKind",
    "ToolStateExtractor",
    "ToolStep",
    "Transcript",
    "initial_state",
    "violations",
]
