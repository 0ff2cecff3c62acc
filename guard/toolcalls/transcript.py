"""What an agent did so far, in a form independent of any agent framework — the input types
of the integration: :class:`Transcript`, :class:`ToolStep`, :class:`CallStatus`, the extractor
base (:class:`StateExtractor`) and its :class:`ExtractionError`. (``domains.tools`` builds on
these and re-exports them under their old names.)

A :class:`Transcript` is the input of a state extractor: the user's own messages and
the tool calls the agent made, with their results once they ran. The LangChain
integration builds one from an agent's messages, the trace generator builds them
directly; both hand them to the same extractor, which is what makes a model learned
from generated runs valid for a real agent.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from ...errors import InputError


class CallStatus(str, Enum):
    """Where a tool call stands.

    ``proposed``: the model asked for it and it has not run (a look-ahead treats it as
    if it were about to succeed); ``success`` / ``error``: it ran.
    """

    PROPOSED = "proposed"
    SUCCESS = "success"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class ToolStep:
    """One tool call.

    Attributes:
        name: the tool's name.
        args: its arguments (normally a JSON object; anything else is for the extractor
            to reject).
        status: proposed, success or error.
        result: the tool's output as text, once it ran.
        id: the call's id, when the framework gives one.
        approved: a human approved (or edited) this very call when the guard asked.
    """

    name: str
    args: Any
    status: CallStatus = CallStatus.SUCCESS
    result: str | None = None
    id: str | None = None
    approved: bool = False

    def ran(self, result: str | None, *, error: bool = False) -> ToolStep:
        """This call after it ran, with its result."""
        return replace(self, status=CallStatus.ERROR if error else CallStatus.SUCCESS, result=result)


@dataclass(frozen=True, slots=True)
class Transcript:
    """The user's messages and the agent's tool calls so far, oldest first.

    Attributes:
        user_messages: text the user typed (not text the agent read from tools).
        steps: the tool calls that ran, and possibly proposed ones at the end.
        messages: the framework's own message objects, for custom extractors that
            need more than this (empty when the transcript was generated).
    """

    user_messages: tuple[str, ...] = ()
    steps: tuple[ToolStep, ...] = ()
    messages: Sequence[Any] = field(default=(), compare=False, repr=False)

    def then(self, *steps: ToolStep) -> Transcript:
        """This transcript with more steps at the end."""
        return Transcript(self.user_messages, self.steps + steps, self.messages)

    def said(self, text: str) -> Transcript:
        """This transcript with one more user message."""
        return replace(self, user_messages=self.user_messages + (text,))

    @classmethod
    def of(cls, user: str | Sequence[str] = (), steps: Sequence[ToolStep | Mapping[str, Any]] = ()) -> Transcript:
        """A transcript from plain data: ``steps`` may be ``{"name", "args", ...}`` dicts."""
        users = (user,) if isinstance(user, str) else tuple(user)
        built = tuple(s if isinstance(s, ToolStep) else _step(s) for s in steps)
        return cls(user_messages=users, steps=built)


def _step(data: Mapping[str, Any]) -> ToolStep:
    status = CallStatus(data.get("status", CallStatus.SUCCESS))
    return ToolStep(name=str(data["name"]), args=data.get("args", {}), status=status,
                    result=data.get("result"), id=data.get("id"), approved=bool(data.get("approved", False)))


@runtime_checkable
class StateExtractor(Protocol):
    """The extractor base: what the agent did so far → the concrete state the guard's spec reads.

    Any callable ``Transcript -> Mapping`` is one. An extractor may also say which tools it
    knows (``knows(name) -> bool``): the middleware treats the calls of the others as of
    unknown effect (its ``unknown_tools`` action); one without ``knows`` knows every tool.
    """

    def __call__(self, transcript: Transcript) -> Mapping[str, Any]: ...


class ExtractionError(InputError):
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


def describe_call(name: str, args: Any) -> str:
    """A call as a person or a model reads it: the tool and its arguments as JSON, cut at 300 characters
    (the LangChain middleware's and the MCP proxy's messages say it the same way)."""
    try:
        shown = json.dumps(args, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        shown = repr(args)
    if len(shown) > 300:
        shown = shown[:297] + "..."
    return f"`{name}` with arguments {shown}"
