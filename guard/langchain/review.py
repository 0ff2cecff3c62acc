"""The human review of a call: the interrupt's payload and the answers it accepts.

The payload has the shape of LangChain's ``HITLRequest`` (``action_requests`` and
``review_configs``) plus a ``forewarn`` entry with the decision, so a client that
renders LangChain's human-in-the-loop interrupts renders Forewarn's too. The answer is
what LangChain's middleware takes, ``{"decisions": [decision]}``, or the bare decision:
``{"type": "approve"}``, ``{"type": "reject", "message"?: reason}`` or
``{"type": "edit", "edited_action": {"name": tool, "args": {...}}}``.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ...errors import InputError
from ..runtime import Decision

ReviewType = Literal["approve", "edit", "reject"]
REVIEW_TYPES: tuple[ReviewType, ...] = ("approve", "edit", "reject")


class ReviewError(InputError):
    """A reviewer's answer that cannot be read, is not allowed here, or edits the call to a tool the
    agent does not have."""


@dataclass(frozen=True, slots=True)
class Review:
    """A reviewer's answer about one call."""

    type: ReviewType
    name: str | None = None      # edit: the tool to call instead (None: the same)
    args: dict[str, Any] | None = None  # edit: the arguments to call it with
    message: str | None = None   # reject: the reason, passed on to the model


def review_payload(name: str, args: Any, call_id: str | None, description: str, decision: Decision,
                   allowed: Sequence[ReviewType], context: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The interrupt's value: LangChain's HITL shape, and under ``forewarn`` the decision with the run's
    ``context`` (``request``: the user's last message; ``metadata``: the run's) for a reviewer's screen."""
    return {
        "action_requests": [{"name": name, "args": args, "description": description}],
        "review_configs": [{"action_name": name, "allowed_decisions": list(allowed)}],
        "forewarn": {"tool_call_id": call_id, **decision.to_dict(), **(context or {})},
    }


def parse_review(answer: Any, allowed: Sequence[ReviewType]) -> Review:
    """Read a resume value as a :class:`Review`.

    Raises:
        ReviewError: naming what is wrong with the answer and what was expected.
    """
    expected = ('expected {"type": "approve"}, {"type": "reject", "message": ...}, '
                '{"type": "edit", "edited_action": {"name": ..., "args": {...}}} or {"decisions": [one of those]}')
    if isinstance(answer, Mapping) and "decisions" in answer:
        decisions = answer["decisions"]
        if not isinstance(decisions, Sequence) or isinstance(decisions, str) or len(decisions) != 1:
            raise ReviewError(f"Forewarn reviews one call per interrupt, so 'decisions' must hold exactly one "
                              f"decision; got {decisions!r}")
        answer = decisions[0]
    if not isinstance(answer, Mapping) or "type" not in answer:
        raise ReviewError(f"cannot read the review {answer!r}: {expected}")
    kind = answer["type"]
    if kind not in REVIEW_TYPES:
        raise ReviewError(f"unknown review type {kind!r}: {expected}")
    if kind not in allowed:
        raise ReviewError(f"review type {kind!r} is not allowed here; allowed: {list(allowed)}")
    if kind == "edit":
        edited = answer.get("edited_action")
        if not isinstance(edited, Mapping) or not isinstance(edited.get("args"), Mapping):
            raise ReviewError(f"an edit needs 'edited_action' with 'args' (an object); got {edited!r}")
        name = edited.get("name")
        if name is not None and not isinstance(name, str):
            raise ReviewError(f"edited_action.name must be a tool name, got {name!r}")
        return Review("edit", name=name, args=dict(edited["args"]))
    if kind == "reject":
        message = answer.get("message")
        return Review("reject", message=message if isinstance(message, str) and message else None)
    return Review("approve")


def check_edit(review: Review, call: Mapping[str, Any], tools: Sequence[str]) -> Review:
    """The review, unless it edits ``call`` (a tool call: ``name``, ``args``, ``id``) to a tool not
    among the agent's ``tools``.

    Raises:
        ReviewError: naming the call, the tool asked for and the agent's tools.
    """
    name = review.name or call["name"]
    if review.type == "edit" and name != call["name"] and name not in tools:
        raise ReviewError(f"the reviewer edited call {call.get('id')!r} to tool {name!r}, which the "
                          f"agent does not have; its tools: {', '.join(sorted(tools))}")
    return review
