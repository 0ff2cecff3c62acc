"""The transcript types, now owned by the LangChain integration (:mod:`guard.langchain.transcript`);
re-exported here so that old imports keep working."""
from __future__ import annotations

from forewarn.guard.langchain.transcript import CallStatus, ToolStep, Transcript

__all__ = ["CallStatus", "ToolStep", "Transcript"]
