"""The middleware's settings, checked once at construction.

Each setting out of range is a :class:`~forewarn.errors.ConfigError` naming it and what it
accepts, raised before the agent runs. The checks run in the order the middleware has
always made them (the approvals first; the rest after the threshold warning), so a
construction with several bad settings fails on the same one.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ...errors import ConfigError, PredicateError
from ..bundle_guard import BundleGuard
from ..runtime import Guard
from ..spec import Action
from ..toolcalls.transcript import Transcript
from . import _explain as explain
from ._remote import RemoteGuard
from .review import REVIEW_TYPES, ReviewType

Extractor = Callable[[Transcript], Mapping[str, Any]]
"""A state extractor: what the agent did so far → the concrete state the spec reads."""

Approvals = Literal["interrupt", "sidecar"]


@dataclass(frozen=True, slots=True)
class Settings:
    """How the middleware acts where the guard's decision is not the whole answer (checked)."""

    max_reflections: int
    on_reflection_limit: Action  # ask_human or stop
    on_extraction_error: Action | None  # None: raise
    allowed_decisions: tuple[ReviewType, ...]
    unknown_tools: Action
    reflection_template: str | None


def check_approvals(approvals: Approvals, approval_timeout: float, *, remote: bool) -> None:
    """Who is asked about a call: the graph's interrupt, or a sidecar's approvers (with a client)."""
    if approvals not in ("interrupt", "sidecar") or (approvals == "sidecar" and not remote):
        raise ConfigError(f"approvals={approvals!r}: expected 'interrupt', or 'sidecar' with a Client or "
                          f"AsyncClient of a sidecar as the guard")
    if not approval_timeout > 0:
        raise ConfigError(f"approval_timeout={approval_timeout!r} must be a positive number of seconds")


def check_settings(*, max_reflections: int, on_reflection_limit: Action | str,
                   on_extraction_error: Action | Literal["raise"] | str, allowed_decisions: Sequence[ReviewType],
                   unknown_tools: Action | str, reflection_template: str | None) -> Settings:
    """The settings, as the middleware keeps them (enums, a tuple)."""
    if max_reflections < 0:
        raise ConfigError(f"max_reflections={max_reflections!r} must be 0 or more")
    limit = Action(on_reflection_limit)
    if limit not in (Action.ASK_HUMAN, Action.STOP):
        raise ConfigError(f"on_reflection_limit={limit.value!r}: expected 'ask_human' or 'stop'")
    fallback: Action | None = None
    if on_extraction_error != "raise":
        fallback = Action(on_extraction_error)
        if fallback is Action.ALLOW:
            raise ConfigError("on_extraction_error='allow' would wave through calls the guard cannot read; "
                              "use 'raise', 'reflect', 'ask_human' or 'stop'")
    unknown = [d for d in allowed_decisions if d not in REVIEW_TYPES]
    if unknown or not allowed_decisions:
        raise ConfigError(f"allowed_decisions={list(allowed_decisions)!r}: choose from {list(REVIEW_TYPES)}")
    unknown_action = Action(unknown_tools)
    if reflection_template is not None:
        explain.check_template(reflection_template)
    return Settings(max_reflections, limit, fallback, tuple(allowed_decisions), unknown_action, reflection_template)


def check_extractor(guard: Guard | BundleGuard | RemoteGuard, extractor: Extractor,
                    metadata: Mapping[str, Any] | Callable[..., Any] | None) -> None:
    """Fail now, not mid-run, if the extractor and the spec do not fit together (the run's metadata
    is known only when a run starts: a field missing there is checked then).

    Raises:
        PredicateError: the guard's predicates cannot read the extractor's initial state.
    """
    try:
        given = metadata if isinstance(metadata, Mapping) else None
        guard.predicates.evaluate(extractor(Transcript()), given)
    except PredicateError as exc:
        if exc.where != "meta" or isinstance(metadata, Mapping):
            raise
