"""From LangChain messages to a :class:`~domains.tools.Transcript`, and Forewarn's marks.

Forewarn marks the messages it adds with LangChain's notification metadata
(``additional_kwargs["lc_source"] = "forewarn"`` and ``lc_data``), which chat model
integrations do not send to the model. A tool message marked ``executed: False`` stands
for a call that never ran (held back, rejected, stopped); such calls are not part of
what the agent did. LangChain's own human-in-the-loop rejections are read the same way.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage, get_notification_metadata

from domains.tools.transcript import CallStatus, ToolStep, Transcript

__all__ = ["SOURCE", "message_text", "mark", "forewarn_data", "transcript_from_messages", "user_texts"]

SOURCE = "forewarn"
_HITL_SOURCE = "hitl_interrupt_decision"
M = TypeVar("M", bound=BaseMessage)


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


def mark(message: M, data: dict[str, Any]) -> M:
    """A copy of ``message`` marked as added (or annotated) by Forewarn."""
    kwargs = {k: v for k, v in message.additional_kwargs.items() if k != "lc_data"}
    kwargs["lc_source"] = SOURCE
    kwargs["lc_data"] = dict(data)
    return message.model_copy(update={"additional_kwargs": kwargs})


def forewarn_data(message: BaseMessage) -> dict[str, Any] | None:
    """The data Forewarn attached to a message, or None if it did not mark it."""
    metadata = get_notification_metadata(message)
    if metadata is None or metadata["source"] != SOURCE:
        return None
    return metadata.get("data", {})


def _executed(message: ToolMessage) -> bool:
    metadata = get_notification_metadata(message)
    if metadata is None:
        return True
    data = metadata.get("data", {})
    if metadata["source"] == SOURCE:
        return data.get("executed", True) is not False
    if metadata["source"] == _HITL_SOURCE:
        return data.get("decision") not in ("reject", "respond")
    return True


def user_texts(messages: Iterable[BaseMessage]) -> list[str]:
    """What the user typed: human messages, leaving out those the harness added."""
    return [message_text(m.content) for m in messages
            if isinstance(m, HumanMessage) and get_notification_metadata(m) is None]


def transcript_from_messages(messages: Sequence[BaseMessage], approved: Iterable[str] = ()) -> Transcript:
    """The user's messages and the tool calls that ran, in order.

    Calls still waiting for their result (no tool message yet) and calls that never ran
    are left out. ``approved`` holds the ids of calls a human approved.
    """
    approved_ids = set(approved)
    results: dict[str, ToolMessage] = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    users: list[str] = []
    steps: list[ToolStep] = []
    for message in messages:
        if isinstance(message, HumanMessage):
            if get_notification_metadata(message) is None:
                users.append(message_text(message.content))
        elif isinstance(message, AIMessage) and message.tool_calls:
            for call in message.tool_calls:
                result = results.get(call["id"] or "")
                if result is None or not _executed(result):
                    continue
                status = CallStatus.ERROR if result.status == "error" else CallStatus.SUCCESS
                steps.append(ToolStep(call["name"], call["args"], status, message_text(result.content),
                                      id=call["id"], approved=call["id"] in approved_ids))
    return Transcript(user_messages=tuple(users), steps=tuple(steps), messages=messages)
