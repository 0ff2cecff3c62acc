"""The one error family Forewarn raises for bad input: specs, traces, model files."""
from __future__ import annotations

__all__ = [
    "ForewarnError",
    "SpecError",
    "TraceError",
    "PredicateError",
    "ModelFileError",
    "CheckError",
    "ForewarnWarning",
    "ThresholdWarning",
]


class ForewarnError(ValueError):
    """Base of every error caused by what a user handed to Forewarn.

    Subclasses ``ValueError`` so callers that already catch bad values keep working.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class SpecError(ForewarnError):
    """A spec that does not parse or does not make sense; names the file and line."""

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None) -> None:
        where = source or "<spec>"
        if line is not None:
            where = f"{where}:{line}"
        super().__init__(f"{where}: {message}")
        self.source = source
        self.line = line


class TraceError(ForewarnError):
    """A trace line that is malformed; names the file, line and field."""

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        where = source or "<traces>"
        if line is not None:
            where = f"{where}:{line}"
        prefix = f"{where}: {field}: " if field else f"{where}: "
        super().__init__(prefix + message)
        self.source = source
        self.line = line
        self.field = field


class PredicateError(ForewarnError):
    """A predicate that cannot be evaluated on a given state (missing field, wrong type)."""

    def __init__(self, message: str, *, predicate: str | None = None, where: str = "state") -> None:
        super().__init__(message)
        self.predicate = predicate
        self.where = where  # "state" or "meta": which one lacks what the predicate reads


class ModelFileError(ForewarnError):
    """A model file that is missing, corrupt, hand-edited or of an unknown schema."""


class CheckError(ForewarnError):
    """A property Storm cannot parse or check on the given model."""


class ForewarnWarning(UserWarning):
    """Base of the warnings Forewarn emits about a setting that works but likely surprises."""


class ThresholdWarning(ForewarnWarning):
    """A configured threshold already crossed where runs start: their first steps will all be acted on."""
