"""Errors of the tool-using agent domain."""
from __future__ import annotations

from typing import Any

from guard.errors import ForewarnError

__all__ = ["ExtractionError"]


class ExtractionError(ForewarnError):
    """A tool call whose arguments the state extractor cannot read.

    The guard cannot judge a call it cannot read, so this is raised rather than the
    call being waved through (the LangChain middleware can map it to an action instead).

    Attributes:
        tool: the tool's name as the agent called it.
        args: the arguments as the agent passed them.
        reason: what is wrong with them.
    """

    def __init__(self, tool: str, args: Any, reason: str) -> None:
        super().__init__(f"cannot read the call to tool {tool!r} with arguments {_short(args)}: {reason}")
        self.tool = tool
        self.args = args
        self.reason = reason


def _short(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
