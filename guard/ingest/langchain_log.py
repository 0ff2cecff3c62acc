"""LangChain ``AgentExecutor`` / ReAct logs: ``intermediate_steps`` of ``[action, observation]``.

``AgentExecutor(..., return_intermediate_steps=True)`` returns, and many projects log,
one object a run::

    {"input": "Put the mug in the sink.",
     "intermediate_steps": [
        [{"tool": "find", "tool_input": "mug", "log": "Thought: ...\\nAction: find"}, "Found mug."],
        [{"tool": "pick", "tool_input": {"object": "mug"}, "log": "..."}, {"success": false, "message": "..."}]],
     "output": "...", "id": "ep-3", "meta": {...}}

An action is an ``AgentAction`` as a plain object (``tool``, ``tool_input``, ``log``;
``tool_call_id`` for tool-calling agents) or as LangChain's own serialisation
(``{"lc": 1, "type": "constructor", "id": [..., "AgentAction"], "kwargs": {...}}``);
a step may also be an object ``{"action": ..., "observation": ...}``. The observation
is the tool's output: text, or an object whose ``success: false`` (or ``status:
"error"``) marks a failed call. ``input`` (text, or ``{"input"|"question"|"query":
text}``, or chat ``messages``) gives the user's words.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from ...errors import TraceError
from ..traces import Run
from ._documents import Record, kind_of, records
from .actions import check_on_mismatch, parse_actions
from .agents import AgentLog, Call, agent_runs
from .formats import LogFormat, Reading, not_an_object
from .worlds import ActionWorld

_RESULT_KEYS = ("message", "output", "result", "observation", "content", "error")


def is_langchain_log(value: Any) -> bool:
    return isinstance(value, dict) and "intermediate_steps" in value


def parse_intermediate_steps(record: Record) -> AgentLog:
    """One AgentExecutor run as what the agent did.

    Raises:
        TraceError: naming the file, line and field at fault.
    """
    doc = record.value
    if not isinstance(doc, dict):
        raise record.error(f"an AgentExecutor log must be a JSON object, got {kind_of(doc)}")
    steps = doc.get("intermediate_steps")
    if not isinstance(steps, list):
        raise record.error("missing or not a list" if steps is None else f"expected a list of [action, observation], "
                           f"got {kind_of(steps)}", "intermediate_steps")
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise record.error(f"expected an object, got {kind_of(meta)}", "meta")
    calls = [_call(record, step, i) for i, step in enumerate(steps)]
    default_id = f"line-{record.line}" if record.index is None else f"run-{record.index}"
    run_id = doc.get("id", default_id)
    if not isinstance(run_id, (str, int)) or run_id.__class__ is bool:
        raise record.error(f"expected a string, got {kind_of(run_id)}", "id")
    extra = {k: doc[k] for k in ("task", "success") if k in doc and isinstance(doc[k], (str, bool))}
    return AgentLog(id=str(run_id), source=record.source, line=record.line, user=_user(record, doc.get("input")),
                    calls=calls, meta={**extra, **meta})


def _call(record: Record, step: Any, index: int) -> Call:
    where = f"intermediate_steps[{index}]"
    if isinstance(step, dict) and "action" in step:
        action, observation = step["action"], step.get("observation")
    elif isinstance(step, list) and len(step) == 2:
        action, observation = step
    else:
        raise record.error(f"expected [action, observation], got {kind_of(step)}"
                           + (f" of {len(step)} items" if isinstance(step, list) else ""), where)
    if isinstance(action, dict) and action.get("lc") == 1 and isinstance(action.get("kwargs"), dict):
        action = action["kwargs"]  # LangChain's dumpd() form
    if not isinstance(action, dict):
        raise record.error(f"expected an AgentAction object with 'tool' and 'tool_input', got {kind_of(action)}",
                           f"{where}[0]")
    tool = action.get("tool")
    if not isinstance(tool, str) or not tool:
        raise record.error("missing: the tool's name" if tool is None else
                           f"expected the tool's name, got {kind_of(tool)}", f"{where}[0].tool")
    args = _arguments(record, action, where)
    call_id = action.get("tool_call_id")
    error, result = _observation(observation)
    return Call(name=tool, args=args, error=error, result=result,
                id=call_id if isinstance(call_id, str) else None, field=where)


_ARGUMENT_KEYS = ("tool_input", "input", "args", "arguments")  # LangChain, AgentSpec, OpenAI-style logs
_ACTION_KEYS = {"tool", "log", "tool_call_id", "type", "message_log", "id"}  # an action's fields besides arguments


def _arguments(record: Record, action: dict[str, Any], where: str) -> Any:
    """The call's arguments under the first of ``tool_input``, ``input``, ``args``, ``arguments`` (a JSON
    object written as text is decoded). An action with other fields but none of these is reported, not read
    with empty arguments: silently dropping them would hide every argument of every call."""
    for key in _ARGUMENT_KEYS:
        if key in action:
            value = action[key]
            if isinstance(value, str) and key == "arguments" and value.lstrip().startswith("{"):
                try:
                    return orjson.loads(value)
                except orjson.JSONDecodeError:
                    raise record.error("not a JSON object", f"{where}[0].arguments") from None
            return value
    unknown = sorted(set(action) - _ACTION_KEYS)
    if unknown:
        raise record.error(f"no arguments under {', '.join(_ARGUMENT_KEYS)}; the action has {', '.join(unknown)} "
                           "instead", f"{where}[0]")
    return {}


def _observation(observation: Any) -> tuple[bool, str | None]:
    """Whether the call failed, and its output as text."""
    if observation is None:
        return False, None
    if isinstance(observation, str):
        return False, observation
    if isinstance(observation, dict):
        failed = observation.get("success") is False or observation.get("status") == "error"
        for key in _RESULT_KEYS:
            if isinstance(observation.get(key), str):
                return failed, observation[key]
        return failed, orjson.dumps(observation, default=str).decode()
    return False, orjson.dumps(observation, default=str).decode()


def _user(record: Record, value: Any) -> list[str]:
    """The user's words: text, ``{"input"|"question"|"query": text}`` or chat messages."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        for key in ("input", "question", "query", "instruction"):
            if isinstance(value.get(key), str):
                return [value[key]]
        value = value.get("messages", [])
    if isinstance(value, list):
        out = []
        for message in value:
            if isinstance(message, dict) and message.get("role", message.get("type")) in ("user", "human"):
                content = message.get("content")
                out.append(content if isinstance(content, str) else _text(content))
            elif isinstance(message, list) and len(message) == 2 and message[0] in ("user", "human"):
                out.append(str(message[1]))
        return out
    raise record.error(f"expected the user's input as text or an object, got {kind_of(value)}", "input")


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(b["text"] if isinstance(b, dict) and isinstance(b.get("text"), str) else str(b)
                         for b in content if isinstance(b, (str, dict)))
    return "" if content is None else str(content)


def as_action_log(log: AgentLog) -> dict[str, Any]:
    """An embodied agent's AgentExecutor run as an action log (``--extractor household``).

    ``find`` with input ``mug`` becomes the action ``find mug``, with the observation's
    success flag; the task comes from ``task`` / ``meta.task``, else the user's input is
    taken as the task's instruction. The household then replays the actions
    (:mod:`guard.ingest.actions`), so the states are the embodied domain's.
    """
    actions = []
    for call in log.calls:
        if isinstance(call.args, str) and " " in call.name.strip():
            # one controller tool whose text input is the whole action (AgentSpec's "robotic controller"
            # with "pick Egg"): the tool's name is no action of the household
            actions.append({"action": call.args.strip(), "success": not call.error})
            continue
        if isinstance(call.args, dict):
            words = " ".join(str(v) for v in call.args.values() if v is not None and v != "")
        else:
            words = "" if call.args is None else str(call.args)
        actions.append({"action": f"{call.name} {words}".strip(), "success": not call.error})
    doc: dict[str, Any] = {"id": log.id, "actions": actions, "meta": dict(log.meta)}
    if "task" in log.meta:
        doc["task"] = log.meta["task"]
    elif log.user:
        doc["instruction"] = log.user[0]
    if isinstance(log.meta.get("success"), bool):
        doc["task_success"] = log.meta["success"]
    return doc


def read_logs(path: Path, reading: Reading) -> Iterator[AgentLog]:
    """The AgentExecutor runs of a file; a bad record goes to ``reading.handle``."""
    for record in records(path, on_bad=reading.bad):
        try:
            yield parse_intermediate_steps(record)
        except TraceError as exc:
            reading.handle(exc)


def household_runs(logs: Iterator[AgentLog], reading: Reading, origin: str) -> Iterator[Run]:
    """An embodied agent's runs replayed in the reading's world (``--extractor household``): each as the
    action log :func:`as_action_log` makes of it, read as the ``actions`` format reads one."""
    check_on_mismatch(reading.on_mismatch)
    world = reading.actions_world()
    for log in logs:
        try:
            yield household_run(log, world, reading, origin)
        except TraceError as exc:
            reading.handle(exc)


def household_run(log: AgentLog, world: ActionWorld, reading: Reading, origin: str) -> Run:
    """One embodied agent's run replayed in ``world`` (see :func:`household_runs`).

    Raises:
        TraceError: an action the world cannot read, or (``on_mismatch="error"``) cannot succeed.
    """
    record = Record(as_action_log(log), log.source, line=log.line)
    run = parse_actions(record, world, on_mismatch=reading.on_mismatch, on_rewrite=reading.summary.mismatch)
    run.meta["ingested_from"] = origin
    return run


def _why_not(record: Any) -> str | None:
    return not_an_object(record) or (None if "intermediate_steps" in record else "no 'intermediate_steps'")


def _read(path: Path, reading: Reading) -> Iterator[Run]:
    logs = read_logs(path, reading)
    return household_runs(logs, reading, "langchain") if reading.household else agent_runs(logs, reading,
                                                                                            "langchain")


FORMAT = LogFormat("langchain", "LangChain AgentExecutor / ReAct intermediate_steps", _why_not, _read,
                   agent=True, household=True)
