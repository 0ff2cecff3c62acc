"""Errors of the embodied domain: bad task files and action strings that do not parse."""
from __future__ import annotations

from ...errors import InputError

__all__ = ["EmbodiedError", "ActionParseError", "TaskFileError"]


class EmbodiedError(InputError):
    """Base of every error the embodied domain raises for bad input (a ForewarnError, so a ValueError)."""


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
