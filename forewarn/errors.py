"""The one error family Forewarn raises for bad input: specs, traces, model files, settings.

Every error a user can cause (a bad file, a bad setting, an impossible request, a state space
too large to build) is a :class:`ForewarnError`, with a one-line message; the CLI prints it as
``error: <message>`` and exits with status 2. The families of other parts subclass these
(``monitors``, ``server``, ``guard.langchain``, ``guard.llmcheck``, ``guard.trust``, the
domains); docs/errors.md lists them all. Errors outside the family are bugs (an internal
invariant that broke), never a user's doing.

This module is a leaf below every layer, importing nothing: the monitors, which import
nothing else of Forewarn, join the family through it."""
from __future__ import annotations

__all__ = [
    "ForewarnError",
    "InputError",
    "SpecError",
    "TraceError",
    "PredicateError",
    "PredicateBudgetExceeded",
    "ModelFileError",
    "CheckError",
    "ConfigError",
    "UsageError",
    "MonitorError",
    "StateSpaceTooLargeError",
    "ForewarnWarning",
    "ThresholdWarning",
]


class ForewarnError(Exception):
    """Base of every error Forewarn raises on purpose, with a one-line message.

    Two kinds below it: :class:`InputError` (what a user handed in is wrong; also a
    ``ValueError``) and the infrastructure's errors (a database, a sidecar, a missing extra),
    which are not ``ValueError`` subclasses: a caller that catches bad values does not swallow an
    outage. The message is one line (scripts grep it); a multi-line text handed in (a parser's
    report quoted whole) is joined into one, and kept as it was in ``detail``.
    """

    def __init__(self, message: str) -> None:
        message = str(message)
        lines = [part.strip() for part in message.splitlines() if part.strip()]
        one_line = " ".join(lines)
        super().__init__(one_line)
        self.message = one_line
        self.detail: str | None = message if len(lines) > 1 else None

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class InputError(ForewarnError, ValueError):
    """What a user handed to Forewarn (a file, a setting, an option, a request) is wrong.

    Also a ``ValueError``, so callers that already catch bad values keep working."""


class SpecError(InputError):
    """A spec that does not parse or does not make sense; names the file and line."""

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None) -> None:
        where = source or "<spec>"
        if line is not None:
            where = f"{where}:{line}"
        super().__init__(f"{where}: {message}")
        self.source = source
        self.line = line


class TraceError(InputError):
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


class PredicateError(InputError):
    """A predicate that cannot be evaluated on a given state (missing field, wrong type)."""

    def __init__(self, message: str, *, predicate: str | None = None, where: str = "state") -> None:
        super().__init__(message)
        self.predicate = predicate
        self.where = where  # "state", "meta" or "action": which one lacks what the predicate reads


class PredicateBudgetExceeded(PredicateError):
    """Evaluating the predicates on a state would cost more CPU than their budget allows (estimated
    before anything runs). A guard answers such a step with the policy's unseen-state action."""


class ModelFileError(InputError):
    """A model file that is missing, corrupt, hand-edited or of an unknown schema."""


class CheckError(InputError):
    """A property Storm cannot parse or check on the given model."""


class ConfigError(InputError):
    """A setting, option or argument that is out of range, contradictory or names something unknown
    (server settings, middleware options, simulator parameters); names the key."""


class UsageError(InputError):
    """A request that cannot apply where it was made: an option of another mode, waiting for the
    approval of a decision that has none, a look-up the object does not offer."""


class MonitorError(InputError):
    """A runtime-verification monitor that is ill-defined (``monitors``: ConditionError,
    MonitorSemanticsError)."""


class StateSpaceTooLargeError(InputError):
    """A state space past a configured limit (the dense chain without a transition rule, a
    monitor product); the message says the limit and how to stay under it or raise it."""

    def __init__(self, message: str, *, states: int | None = None, limit: int | None = None) -> None:
        super().__init__(message)
        self.states = states
        self.limit = limit


class ForewarnWarning(UserWarning):
    """Base of the warnings Forewarn emits about a setting that works but likely surprises."""


class ThresholdWarning(ForewarnWarning):
    """A configured threshold already crossed where runs start: their first steps will all be acted on."""
