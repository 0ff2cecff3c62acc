"""``TraceRecorder``: log runs of any LangChain runnable in Forewarn's trace format.

A callback handler, so it needs only ``langchain-core`` and one line::

    recorder = TraceRecorder("runs.jsonl")
    agent.invoke({"messages": [("user", "...")]}, config={"callbacks": [recorder]})

Each run is one JSONL line ``{"id", "steps": [{"state", "action", "t"}], "meta"}``. The
first step is the state before any tool ran; every tool that ends (or fails) adds the
state the extractor makes of the run so far, with the call as the step's action. A
run is written when its outermost runnable ends. A LangGraph interrupt does not end
it: the invocation that resumes the same thread continues the same run. The runs of a
thread share what the agent did before (the states of a later turn include the calls
of earlier ones), as the middleware's states do.
"""
from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from .._extras import extra_error

try:
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.messages import HumanMessage, ToolMessage, get_notification_metadata
except ModuleNotFoundError as exc:
    raise extra_error("langchain", "forewarn.guard.langchain.recorder", exc) from None

from ...errors import ForewarnError
from ..toolcalls.extractor import ToolStateExtractor
from ..toolcalls.transcript import CallStatus, ExtractionError, ToolStep, Transcript
from ._messages import REVIEWED, message_text, value_text

Extractor = Callable[[Transcript], Mapping[str, Any]]
_MAX_THREADS = 1024


@dataclass
class _Run:
    key: str
    transcript: Transcript
    started: float
    steps: list[dict[str, Any]] = field(default_factory=list)
    interrupted: bool = False
    error: str | None = None


@dataclass
class _PendingCall:
    root: str
    name: str
    args: Any
    call_id: str | None
    approved: bool = False


class TraceRecorder(BaseCallbackHandler):
    """Record agent runs as Forewarn traces (JSONL, one run a line).

    Args:
        path: the file to append runs to; None keeps them in :attr:`records` only.
        extractor: the state extractor, as the guard will use it; the tool domain's
            ``ToolStateExtractor()`` when None.
        meta: extra fields for every run's ``meta``.

    Attributes:
        records: every run written, as dicts.
        errors: runs left out, with the reason (a call the extractor could not read,
            so a state would be missing); recording never breaks the agent.
    """

    raise_error = False

    def __init__(self, path: str | Path | None = None, *, extractor: Extractor | None = None,
                 meta: Mapping[str, Any] | None = None) -> None:
        self.path = None if path is None else Path(path)
        self.extractor: Extractor = extractor if extractor is not None else ToolStateExtractor()
        self.meta = dict(meta or {})
        self.records: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._runs: dict[str, _Run] = {}            # open runs, by thread id or root run id
        self._threads: dict[str, Transcript] = {}   # what each thread did, across its runs
        self._roots: dict[uuid.UUID, str] = {}      # any run id -> the key of its root
        self._calls: dict[uuid.UUID, _PendingCall] = {}

    # -- roots ----------------------------------------------------------------------

    def on_chain_start(self, serialized: dict[str, Any] | None, inputs: Any, *, run_id: uuid.UUID,
                       parent_run_id: uuid.UUID | None = None, metadata: dict[str, Any] | None = None,
                       **kwargs: Any) -> None:
        with self._lock:
            if parent_run_id is not None:
                root = self._roots.get(parent_run_id)
                if root is not None:
                    self._roots[run_id] = root
                return
            thread = (metadata or {}).get("thread_id")
            key = str(thread) if thread is not None else str(run_id)
            self._roots[run_id] = key
            run = self._runs.get(key)
            if run is not None and run.interrupted:
                run.interrupted = False
                if _is_resume(inputs):  # the same run goes on
                    return
                self._finish(key)  # answered with new input instead: the paused run ends there
            transcript = self._threads.get(key, Transcript())
            for text in _user_inputs(inputs):
                transcript = transcript.said(text)
            run = _Run(key, transcript, time.monotonic())
            self._runs[key] = run
            self._step(run, None)

    def on_chain_end(self, outputs: Any, *, run_id: uuid.UUID, parent_run_id: uuid.UUID | None = None,
                     **kwargs: Any) -> None:
        with self._lock:
            key = self._roots.pop(run_id, None)
            if parent_run_id is None and key is not None:
                self._finish(key)

    def on_chain_error(self, error: BaseException, *, run_id: uuid.UUID, parent_run_id: uuid.UUID | None = None,
                       **kwargs: Any) -> None:
        with self._lock:
            key = self._roots.get(run_id) if parent_run_id is None else self._roots.pop(run_id, None)
            run = self._runs.get(key) if key is not None else None
            if run is not None:
                # LangGraph pauses a run by raising GraphInterrupt through its nodes.
                if type(error).__name__ in ("GraphInterrupt", "NodeInterrupt"):
                    run.interrupted = True
                elif parent_run_id is None:
                    run.error = f"{type(error).__name__}: {error}"
            if parent_run_id is None and key is not None:
                self._roots.pop(run_id, None)
                self._finish(key)

    # -- tools ----------------------------------------------------------------------

    def on_tool_start(self, serialized: dict[str, Any] | None, input_str: str, *, run_id: uuid.UUID,
                      parent_run_id: uuid.UUID | None = None, inputs: dict[str, Any] | None = None,
                      **kwargs: Any) -> None:
        with self._lock:
            root = self._roots.get(parent_run_id) if parent_run_id is not None else None
            if root is None:  # a tool invoked on its own is a run of its own
                root = str(run_id)
                self._runs[root] = _Run(root, Transcript(), time.monotonic())
                self._step(self._runs[root], None)
            name = kwargs.get("name") or (serialized or {}).get("name") or "tool"
            args = inputs if inputs is not None else input_str
            call_id = kwargs.get("tool_call_id")
            reviewed = REVIEWED.get()  # set by the middleware while a call a human approved runs
            approved = reviewed is not None and (not call_id or reviewed in ("", call_id))
            self._calls[run_id] = _PendingCall(root, str(name), args, call_id, approved)

    def on_tool_end(self, output: Any, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        with self._lock:
            call = self._calls.pop(run_id, None)
            if call is None:
                return
            error = isinstance(output, ToolMessage) and output.status == "error"
            text = value_text(output)
            self._add(call, CallStatus.ERROR if error else CallStatus.SUCCESS, text)
            if call.root == str(run_id):
                self._finish(call.root)

    def on_tool_error(self, error: BaseException, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        with self._lock:
            call = self._calls.pop(run_id, None)
            if call is None:
                return
            self._add(call, CallStatus.ERROR, f"{type(error).__name__}: {error}")
            if call.root == str(run_id):
                self._finish(call.root)

    # -- runs -------------------------------------------------------------------------

    def _add(self, call: _PendingCall, status: CallStatus, result: str) -> None:
        run = self._runs.get(call.root)
        if run is None:
            return
        step = ToolStep(call.name, call.args, status, result, id=call.call_id, approved=call.approved)
        run.transcript = run.transcript.then(step)
        self._step(run, step)

    def _step(self, run: _Run, step: ToolStep | None) -> None:
        if run.error is not None:
            return
        try:
            state = dict(self.extractor(run.transcript))
        except ForewarnError as exc:
            run.error = str(exc)
            return
        except Exception as exc:  # a user's extractor
            name = step.name if step is not None else "<start>"
            run.error = str(ExtractionError(name, step.args if step else None,
                                            f"the extractor raised {type(exc).__name__}: {exc}"))
            return
        entry: dict[str, Any] = {"state": state, "t": round(time.monotonic() - run.started, 6)}
        if step is not None:  # a call a human approved says so, as in the middleware's commits
            entry["action"] = {"tool": step.name, "args": step.args} | ({"approved": True} if step.approved else {})
        run.steps.append(entry)

    def _finish(self, key: str) -> None:
        run = self._runs.get(key)
        if run is None or run.interrupted:
            return
        del self._runs[key]
        self._threads[key] = run.transcript
        if len(self._threads) > _MAX_THREADS:
            self._threads.pop(next(iter(self._threads)))
        if run.error is not None or not run.steps:
            self.errors.append(f"run {key!r} not recorded: {run.error or 'no steps'}")
            return
        record = {"id": f"{key}-{len(self.records)}", "steps": run.steps,
                  "meta": {"source": "langchain", "run": key, **self.meta}}
        self.records.append(record)
        if self.path is not None:
            with open(self.path, "ab") as out:
                out.write(orjson.dumps(record, default=str))
                out.write(b"\n")


def _is_resume(inputs: Any) -> bool:
    return type(inputs).__name__ == "Command" and getattr(inputs, "resume", None) is not None



def _user_inputs(inputs: Any) -> list[str]:
    """The user's words in a runnable's input: chat messages, a string, or ``{"input": ...}``."""
    if isinstance(inputs, str):
        return [inputs]
    if isinstance(inputs, Mapping):
        if "messages" in inputs:
            return _user_messages(inputs["messages"])
        for key in ("input", "question", "query"):
            if isinstance(inputs.get(key), str):
                return [inputs[key]]
        return []
    if isinstance(inputs, Sequence):
        return _user_messages(inputs)
    return []


def _user_messages(messages: Any) -> list[str]:
    out: list[str] = []
    for message in messages if isinstance(messages, Sequence) and not isinstance(messages, str) else [messages]:
        if isinstance(message, HumanMessage):
            if get_notification_metadata(message) is None:
                out.append(message_text(message.content))
        elif isinstance(message, tuple) and len(message) == 2 and message[0] in ("user", "human"):
            out.append(message_text(message[1]))
        elif isinstance(message, Mapping) and message.get("role") in ("user", "human"):
            out.append(message_text(message.get("content")))
        elif isinstance(message, str):
            out.append(message)
    return out
