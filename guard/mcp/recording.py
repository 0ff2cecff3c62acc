"""``--record FILE``: every proxied session as one contract trace (JSONL), to learn from.

A line is ``{"id", "steps": [{"state", "action", "t"}], "meta"}`` — the format ``forewarn
learn`` and ``forewarn ingest`` read (DESIGN.md). The first step is the state before any call
(no action); each call that ran adds the state the extractor makes of the session so far, with
the call as the step's action. A call the guard held back did not run, so it adds no step; the
meta says how the session ended (``stopped`` when the guard stopped it). A session is written
when it ends: its client disconnected, or the proxy shut down.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from ...errors import ConfigError


class SessionLog:
    """The steps of one session, as they will be written."""

    def __init__(self, session_id: str, initial: Mapping[str, Any], meta: Mapping[str, Any]) -> None:
        self.id = session_id
        self.started = time.monotonic()
        self.steps: list[dict[str, Any]] = [{"state": dict(initial), "t": 0.0}]
        self.meta = dict(meta)
        self.written = False

    def add(self, state: Mapping[str, Any], tool: str, args: Any) -> None:
        self.steps.append({"state": dict(state), "action": {"tool": tool, "args": args},
                           "t": round(time.monotonic() - self.started, 6)})


class TraceWriter:
    """Appends finished sessions to a JSONL file (thread-safe; one line per session, written whole)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab"):
                pass
        except OSError as exc:
            raise ConfigError(f"--record {self.path}: cannot write there: {exc.strerror}") from exc
        self._lock = threading.Lock()
        self.sessions = 0

    def write(self, log: SessionLog, **meta: Any) -> None:
        with self._lock:
            if log.written:
                return
            log.written = True
            record = {"id": log.id, "steps": log.steps, "meta": {"source": "mcp", **log.meta, **meta}}
            line = orjson.dumps(record, default=str) + b"\n"
            with open(self.path, "ab") as out:
                out.write(line)
            self.sessions += 1
