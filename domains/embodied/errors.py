"""Errors of the embodied domain: bad task files and action strings that do not parse."""
from __future__ import annotations

__all__ = ["EmbodiedError", "ActionParseError", "TaskFileError"]


class EmbodiedError(ValueError):
    """Base of every error the embodied domain raises for bad input.

    Subclasses ``ValueError`` so callers that already catch bad values keep working.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class ActionParseError(EmbodiedError):
    """A high-level action string that is not one of the simulator's actions."""

    def __init__(self, text: str, reason: str) -> None:
        super().__init__(f"action {text!r} does not parse: {reason}")
        self.text = text
        self.reason = reason


class TaskFileError(EmbodiedError):
    """A task list line that is not valid JSON or lacks a field; names file and line."""

    def __init__(self, source: str, line: int, reason: str) -> None:
        super().__init__(f"{source}:{line}: {reason}")
        self.source = source
        self.line = line
        self.reason = reason
