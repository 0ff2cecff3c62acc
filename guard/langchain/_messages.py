"""From LangChain messages to a :class:`~domains.tools.Transcript`, and Forewarn's marks.

Forewarn marks the messages it adds or annotates with LangChain's notification metadata
(``additional_kwargs["lc_source"] = "forewarn"`` and ``lc_data``), which chat model
integrations do not send to the model. A tool message marked ``executed: False`` stands
for a call that never ran (held back, rejected, stopped); such calls are not part of
what the agent did. ``approved: True`` marks the result of a call a human approved,
and ``executed_call`` the call a reviewer's edit made of it. LangChain's own
human-in-the-loop rejections are read as calls that never ran.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextvars import ContextVar
from typing import Any, TypeVar

from .._extras import extra_error

try:
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
except ModuleNotFoundError as exc:
    raise extra_error("langchain", "forewarn.guard.langchain._messages", exc) from None

from ..toolcalls.transcript import CallStatus, ToolStep, Transcript

SOURCE = "forewarn"
REVIEWED: ContextVar[str | None] = ContextVar("forewarn_reviewed", default=None)
"""While a call a human approved (or edited) runs: its tool call id. The middleware sets it around the
tool's run, so a :class:`~guard.langchain.recorder.TraceRecorder` in the same run records the approval."""
_HITL_SOURCE = "hitl_interrupt_decision"
M = TypeVar("M", bound=BaseMessage)
_NONE: frozenset[str] = frozenset()


def message_text(content: Any) -> str:
    """The text of a message's content (a string, or a list of text blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and isinstance(block.get("text"), str):
                parts.append(block["text"])
        return "\n".join(parts)
    return "" if content is None else str(content)


def value_text(value: Any) -> str:
    """The text of a tool's or runnable's output: a string, a message, or anything else via str."""
    if isinstance(value, str):
        return value
    content = getattr(value, "content", None)
    if content is not None:
        return message_text(content)
    return "" if value is None else str(value)


def mark(message: M, data: dict[str, Any]) -> M:
    """A copy of ``message`` marked as added (or annotated) by Forewarn."""
    kwargs = {k: v for k, v in message.additional_kwargs.items() if k != "lc_data"}
    kwargs["lc_source"] = SOURCE
    kwargs["lc_data"] = dict(data)
    return message.model_copy(update={"additional_kwargs": kwargs})


def forewarn_data(message: BaseMessage) -> dict[str, Any] | None:
    """The data Forewarn attached to a message, or None if it did not mark it."""
    kwargs = message.additional_kwargs
    if kwargs.get("lc_source") != SOURCE:
        return None
    data = kwargs.get("lc_data")
    return data if isinstance(data, dict) else {}


def _executed(message: ToolMessage) -> bool:
    kwargs = message.additional_kwargs
    source = kwargs.get("lc_source")
    if source is None:
        return True
    data = kwargs.get("lc_data")
    if not isinstance(data, dict):
        return True
    if source == SOURCE:
        return data.get("executed", True) is not False
    if source == _HITL_SOURCE:
        return data.get("decision") not in ("reject", "respond")
    return True


def _typed(message: HumanMessage) -> bool:
    """Typed by the user, not added by the harness (notification metadata)."""
    return not isinstance(message.additional_kwargs.get("lc_source"), str)


def last_request(messages: Iterable[BaseMessage]) -> str | None:
    """The user's last typed message (the request a call serves, shown to an approver), or None."""
    texts = user_texts(messages)
    return texts[-1] if texts else None


def user_texts(messages: Iterable[BaseMessage]) -> list[str]:
    """What the user typed: human messages, leaving out those the harness added."""
    return [message_text(m.content) for m in messages if isinstance(m, HumanMessage) and _typed(m)]


def transcript_from_messages(messages: Sequence[BaseMessage], approved: Iterable[str] = ()) -> Transcript:
    """The user's messages and the tool calls that ran, in order.

    Calls still waiting for their result (no tool message yet) and calls that never ran
    are left out. ``approved`` holds the ids of calls a human approved.
    """
    scan = _scan(messages, set(approved))
    return Transcript(tuple(scan.users), tuple(scan.steps), messages)


class _Scan:
    __slots__ = ("settled", "settled_steps", "settled_users", "steps", "users")

    def __init__(self) -> None:
        self.users: list[str] = []
        self.steps: list[ToolStep] = []
        self.settled = 0         # messages[:settled] have every tool call answered...
        self.settled_users = 0   # ...and hold this many user messages
        self.settled_steps = 0   # ...and this many steps


def _scan(messages: Sequence[BaseMessage], approved: set[str] | frozenset[str]) -> _Scan:
    results: dict[str, ToolMessage] = {}
    for message in messages:
        if isinstance(message, ToolMessage):
            results[message.tool_call_id] = message
    out = _Scan()
    open_calls = 0
    for index, message in enumerate(messages):
        if isinstance(message, HumanMessage):
            if _typed(message):
                out.users.append(message_text(message.content))
        elif isinstance(message, AIMessage):
            for call in message.tool_calls:
                call_id = call["id"]
                result = results.get(call_id or "")
                if result is None:
                    open_calls += 1
                    continue
                if not _executed(result):
                    continue
                name, args, was_approved = call["name"], call["args"], call_id in approved
                data = forewarn_data(result)
                if data:  # what a reviewer approved, or edited the call into
                    executed = data.get("executed_call")
                    if isinstance(executed, dict):
                        name, args = executed.get("name", name), executed.get("args", args)
                    was_approved = was_approved or data.get("approved") is True
                status = CallStatus.ERROR if result.status == "error" else CallStatus.SUCCESS
                out.steps.append(ToolStep(name, args, status, message_text(result.content), call_id, was_approved))
        if open_calls == 0:
            out.settled, out.settled_users, out.settled_steps = index + 1, len(out.users), len(out.steps)
    return out


class TranscriptCache:
    """Transcripts of one growing conversation, built from the messages added since last time.

    Only a prefix in which every tool call has its answer is kept, so a result arriving
    later cannot change what was cached (approvals are given to calls still open, so
    they cannot either); a conversation whose earlier messages changed (their ids
    differ, say after a summary replaced them) is read again from the start.
    """

    def __init__(self) -> None:
        self._first: str | None = None
        self._last: str | None = None
        self._count = 0
        self._users: tuple[str, ...] = ()
        self._steps: tuple[ToolStep, ...] = ()

    def transcript(self, messages: Sequence[BaseMessage], approved: Iterable[str] = ()) -> Transcript:
        count = self._count
        if count and len(messages) >= count and messages[count - 1].id == self._last \
                and messages[0].id == self._first:
            if len(messages) == count:  # nothing new since the settled prefix
                return Transcript(self._users, self._steps, messages)
        else:
            count, self._users, self._steps = 0, (), ()
        scan = _scan(messages[count:], set(approved) if approved else _NONE)
        users, steps = self._users + tuple(scan.users), self._steps + tuple(scan.steps)
        end = count + scan.settled
        if scan.settled and messages[0].id is not None and messages[end - 1].id is not None:
            self._first, self._last, self._count = messages[0].id, messages[end - 1].id, end
            self._users = users[:len(self._users) + scan.settled_users]
            self._steps = steps[:len(self._steps) + scan.settled_steps]
        return Transcript(users, steps, messages)
