"""LangGraph runs of ``create_agent`` agents: ``stream`` dumps and checkpoints.

What people write down of a LangGraph run, one run a record (a JSON Lines line, or one
document):

* a ``values`` snapshot or ``agent.get_state(config).values``: ``{"messages": [...]}``
  (the whole conversation);
* a checkpoint (a checkpointer's tuple or saved checkpoint):
  ``{"checkpoint": {"channel_values": {"messages": [...]}}}`` or
  ``{"channel_values": {"messages": [...]}}``;
* a ``stream`` dump: ``{"chunks": [...]}`` (or ``"stream"``), each chunk an
  ``updates`` chunk ``{"model": {"messages": [...]}}`` / ``{"tools": {...}}`` (any node
  name), a ``values`` snapshot, or a ``[mode, chunk]`` pair from ``stream_mode=[...]``.
  An ``updates`` stream does not repeat the user's input: give it as ``"input"`` (text
  or ``{"messages": [...]}``) or the run has no user words.

A file whose records are bare ``updates`` chunks (what ``for chunk in
agent.stream(...): print(json.dumps(chunk))`` writes) is one run. ``id`` and ``meta``
beside these keys name the run. Messages may be LangChain's ``model_dump()``
(``{"type": "ai", ...}``), its ``dumpd()`` form (``{"lc": 1, "id": [..., "AIMessage"],
"kwargs": {...}}``) or chat-completion style (``{"role": "assistant", ...}``).

The messages go through the middleware's own reading (which calls ran, which were held
back, approved or edited) and the run's states through the extractor, so they are the
states the guard sees. Needs LangChain (``pip install 'forewarn[langchain]'``).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ...errors import TraceError
from .._extras import require
from ..traces import Run
from ._documents import Record, kind_of, records
from .agents import AgentLog, agent_runs
from .formats import LogFormat, Reading, not_an_object

_WRAPPERS = ("chunks", "stream")
_TYPES = {"human": "human", "user": "human", "ai": "ai", "assistant": "ai", "tool": "tool", "system": "system",
          "function": "tool", "developer": "system", "AIMessageChunk": "ai"}
_CLASSES = {"HumanMessage": "human", "AIMessage": "ai", "AIMessageChunk": "ai", "ToolMessage": "tool",
            "SystemMessage": "system", "HumanMessageChunk": "human", "ToolMessageChunk": "tool"}


def is_update_chunk(value: Any) -> bool:
    """``{"node": {"messages": [...]}}``: one LangGraph ``updates`` chunk."""
    return (isinstance(value, dict) and bool(value) and "messages" not in value
            and all(v is None or (isinstance(v, dict) and "messages" in v) for v in value.values())
            and any(isinstance(v, dict) for v in value.values()))


def is_langgraph(value: Any) -> bool:
    if isinstance(value, list) and len(value) == 2 and isinstance(value[0], str):
        return True  # a [mode, chunk] pair
    if not isinstance(value, dict):
        return False
    return (isinstance(value.get("messages"), list) or "checkpoint" in value or "channel_values" in value
            or any(k in value for k in _WRAPPERS) or is_update_chunk(value))


def read_langgraph_logs(records: Iterator[Record], on_bad: Callable[[TraceError], None]) -> Iterator[AgentLog]:
    """Runs of LangGraph dumps (see the module docstring)."""
    _require_langchain()
    loose: list[Any] = []  # bare chunks: together one run
    first: Record | None = None
    for record in records:
        value = record.value
        if is_update_chunk(value) or (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)):
            first = first or record
            loose.append(value)
            continue
        try:
            yield _run(record, value)
        except TraceError as exc:
            on_bad(exc)
    if first is not None:
        try:
            yield _run(first, {"chunks": loose, "id": f"stream-{first.line or 0}"}, whole_file=True)
        except TraceError as exc:
            on_bad(exc)


def _require_langchain() -> None:
    require("langchain", "reading LangGraph dumps", ("langchain_core",))


def _run(record: Record, doc: Any, whole_file: bool = False) -> AgentLog:
    from ..langchain._messages import transcript_from_messages

    if not isinstance(doc, dict):
        raise record.error(f"a LangGraph run must be a JSON object, got {kind_of(doc)}")
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise record.error(f"expected an object, got {kind_of(meta)}", "meta")
    raw, where = _raw_messages(record, doc)
    messages = _dedupe([_message(record, m, f"{w}") for m, w in zip(raw, where)])
    transcript = transcript_from_messages(messages)
    default_id = f"line-{record.line}" if record.index is None else f"run-{record.index}"
    run_id = doc.get("id", doc.get("thread_id", default_id))
    if not isinstance(run_id, (str, int)) or run_id.__class__ is bool:
        raise record.error(f"expected a string, got {kind_of(run_id)}", "id")
    return AgentLog(id=str(run_id), source=record.source, line=None if whole_file else record.line,
                    user=list(transcript.user_messages), steps=list(transcript.steps), meta=dict(meta))


def _raw_messages(record: Record, doc: dict[str, Any]) -> tuple[list[Any], list[str]]:
    """The run's messages in order, with where each was found."""
    if isinstance(doc.get("checkpoint"), dict):
        doc = doc["checkpoint"]
    if isinstance(doc.get("channel_values"), dict):
        return _from_list(record, doc["channel_values"].get("messages"), "channel_values.messages")
    if "messages" in doc:
        return _from_list(record, doc["messages"], "messages")
    key = next((k for k in _WRAPPERS if k in doc), None)
    if key is None:
        raise record.error("no messages: expected 'messages', 'checkpoint', 'channel_values' or 'chunks'")
    chunks = doc[key]
    if not isinstance(chunks, list):
        raise record.error(f"expected a list of stream chunks, got {kind_of(chunks)}", key)
    out: list[Any] = []
    where: list[str] = []
    user, user_where = _input(record, doc.get("input"))
    out += user
    where += user_where
    for i, chunk in enumerate(chunks):
        at = f"{key}[{i}]"
        if isinstance(chunk, list) and len(chunk) == 2 and isinstance(chunk[0], str):
            mode, chunk = chunk
            at += "[1]"
            if mode not in ("updates", "values"):
                continue  # messages / custom / debug streams carry nothing new here
        if not isinstance(chunk, dict):
            raise record.error(f"expected a stream chunk object, got {kind_of(chunk)}", at)
        if "messages" in chunk:  # a values snapshot: the whole conversation so far
            out, where = _from_list(record, chunk["messages"], f"{at}.messages")
            continue
        for node, update in chunk.items():
            if isinstance(update, dict) and "messages" in update:
                items, places = _from_list(record, update["messages"], f"{at}.{node}.messages")
                out += items
                where += places
    return out, where


def _input(record: Record, value: Any) -> tuple[list[Any], list[str]]:
    if value is None:
        return [], []
    if isinstance(value, str):
        return [{"type": "human", "content": value}], ["input"]
    if isinstance(value, dict) and "messages" in value:
        return _from_list(record, value["messages"], "input.messages")
    raise record.error(f"expected the user's input as text or {{\"messages\": [...]}}, got {kind_of(value)}",
                       "input")


def _from_list(record: Record, value: Any, where: str) -> tuple[list[Any], list[str]]:
    if isinstance(value, dict):  # a single message as a node's update
        value = [value]
    if not isinstance(value, list):
        raise record.error(f"expected a list of messages, got {kind_of(value)}", where)
    return list(value), [f"{where}[{i}]" for i in range(len(value))]


def _message(record: Record, value: Any, where: str) -> Any:
    """One dumped message as a LangChain message object."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
    from pydantic import ValidationError

    if isinstance(value, list) and len(value) == 2 and isinstance(value[0], str):
        value = {"type": value[0], "content": value[1]}  # ("user", "text") as given to invoke
    if not isinstance(value, dict):
        raise record.error(f"expected a message object, got {kind_of(value)}", where)
    if value.get("lc") == 1 and isinstance(value.get("kwargs"), dict):
        ident = value.get("id")
        kind = _CLASSES.get(ident[-1]) if isinstance(ident, list) and ident and isinstance(ident[-1], str) else None
        fields = dict(value["kwargs"])
    else:
        role = value.get("type", value.get("role"))
        kind = _TYPES.get(role) if isinstance(role, str) else None
        fields = {k: v for k, v in value.items() if k not in ("type", "role")}
    if kind is None:
        raise record.error("expected a message with a type (human, ai, tool, system) or a role", where)
    if kind == "ai" and "tool_calls" in fields:
        fields["tool_calls"] = [_tool_call(record, c, f"{where}.tool_calls[{i}]")
                                for i, c in enumerate(_listed(record, fields["tool_calls"], f"{where}.tool_calls"))]
    if kind == "tool" and "tool_call_id" not in fields:
        raise record.error("missing: a tool message needs the tool_call_id it answers", f"{where}.tool_call_id")
    fields.pop("invalid_tool_calls", None)
    fields.pop("usage_metadata", None)
    fields.setdefault("content", "")
    if fields["content"] is None:
        fields["content"] = ""
    cls = {"human": HumanMessage, "ai": AIMessage, "tool": ToolMessage, "system": SystemMessage}[kind]
    try:
        return cls(**fields)
    except (ValidationError, TypeError, ValueError) as exc:
        first = str(exc).splitlines()
        detail = first[2].strip() if len(first) > 2 else first[0] if first else type(exc).__name__
        raise record.error(f"not a valid {kind} message ({detail})", where) from None


def _listed(record: Record, value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise record.error(f"expected a list, got {kind_of(value)}", where)
    return value


def _tool_call(record: Record, call: Any, where: str) -> dict[str, Any]:
    """A tool call in LangChain's shape; OpenAI's ``{"function": {"name", "arguments"}}`` too."""
    import orjson

    if not isinstance(call, dict):
        raise record.error(f"expected a tool call object, got {kind_of(call)}", where)
    if isinstance(call.get("function"), dict):
        function = call["function"]
        args: Any = function.get("arguments", {})
        if isinstance(args, str):
            try:
                args = orjson.loads(args) if args.strip() else {}
            except orjson.JSONDecodeError:
                raise record.error("the call's arguments are not valid JSON", f"{where}.function.arguments") from None
        call = {"name": function.get("name"), "args": args, "id": call.get("id")}
    name = call.get("name")
    if not isinstance(name, str) or not name:
        raise record.error("missing: the called tool's name", f"{where}.name")
    args = call.get("args", {})
    if not isinstance(args, dict):
        raise record.error(f"expected an object of arguments, got {kind_of(args)}", f"{where}.args")
    call_id = call.get("id")
    return {"name": name, "args": args, "id": call_id if isinstance(call_id, str) else None, "type": "tool_call"}


def _dedupe(messages: list[Any]) -> list[Any]:
    """Messages with an id seen before are left out (a values snapshot and updates overlap)."""
    seen: set[str] = set()
    out = []
    for message in messages:
        if message.id is not None:
            if message.id in seen:
                continue
            seen.add(message.id)
        out.append(message)
    return out


def _why_not(record: Any) -> str | None:
    if is_langgraph(record):
        return None
    return not_an_object(record) or ("no 'messages', 'checkpoint', 'channel_values', 'chunks' or node updates "
                                     "({\"model\": {\"messages\": ...}})")


def _read(path: Path, reading: Reading) -> Iterator[Run]:
    return agent_runs(read_langgraph_logs(records(path, on_bad=reading.bad), reading.bad), reading, "langgraph")


FORMAT = LogFormat("langgraph", "LangGraph stream dumps, state snapshots and checkpoints", _why_not, _read,
                   agent=True)
