"""A scripted tool-calling chat model, to run and test guarded agents offline.

langchain-core's fake chat models do not implement ``bind_tools``, which
``create_agent`` calls; this one does (it returns itself) and plays a script::

    model = ScriptedChatModel(script=[
        tool_calls(("read_file", {"path": "README.md"})),
        "Here is the summary.",
    ])

A script entry is an ``AIMessage``, a string (a final answer) or a function of the
messages the model is given that returns either; a whole script may also be one such
function. Tool calls without an id get a fresh one (``call_1``, ``call_2``...).
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import PrivateAttr

from .._extras import extra_error

try:
    from langchain_core.callbacks import CallbackManagerForLLMRun
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
except ModuleNotFoundError as exc:
    raise extra_error("langchain", "forewarn.guard.langchain.testing", exc) from None

Reply = AIMessage | str | Callable[[list[BaseMessage]], "AIMessage | str"]


def tool_calls(*calls: tuple[str, dict[str, Any]], content: str = "") -> AIMessage:
    """An assistant message proposing these ``(name, args)`` calls."""
    return AIMessage(content=content, tool_calls=[{"name": n, "args": a, "id": None, "type": "tool_call"}
                                                  for n, a in calls])


class ScriptedChatModel(BaseChatModel):
    """A chat model that answers from a script (see the module docstring).

    Attributes:
        script: the replies in order, or one function of the messages.
        seen: the messages of every call, in order (to assert on what the model was told).
    """

    script: Any
    seen: list[list[BaseMessage]] = []  # noqa: RUF012 - a pydantic field: each instance gets a copy

    _position: int = PrivateAttr(default=0)
    _ids: Any = PrivateAttr(default_factory=lambda: itertools.count(1))

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        self.seen.append(list(messages))
        if callable(self.script):
            reply = self.script(messages)
        else:
            if self._position >= len(self.script):
                raise IndexError(f"the script has {len(self.script)} replies and the model was called again")
            reply = self.script[self._position]
            self._position += 1
            if callable(reply):
                reply = reply(messages)
        message = AIMessage(content=reply) if isinstance(reply, str) else reply
        if message.tool_calls:
            calls = [{**c, "id": c.get("id") or f"call_{next(self._ids)}"} for c in message.tool_calls]
            message = message.model_copy(update={"tool_calls": calls})
        return ChatResult(generations=[ChatGeneration(message=message)])
