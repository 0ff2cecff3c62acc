"""Errors of LLM-output checking: all are :class:`forewarn.errors.ForewarnError` (exit code 2 in the CLI)."""
from __future__ import annotations

from ...errors import InputError

__all__ = ["LLMCheckError", "SourceError", "QueryError", "QuantificationError"]


class LLMCheckError(InputError):
    """Base of every llmcheck input error."""


class SourceError(LLMCheckError):
    """A token source that cannot be opened or that answered something unusable.

    ``status`` is the HTTP status when an endpoint answered with an error.
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class QueryError(LLMCheckError):
    """A property whose labels do not name a quantification comparison or a reserved label."""


class QuantificationError(LLMCheckError):
    """An unknown quantification, or one given bad arguments."""
