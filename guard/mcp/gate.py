"""What a gateway does around the judging, at the two points every relay shares: a ``tools/list`` answer on
its way back to the client (descriptions judged, tools pinned: :mod:`.descriptions`, :mod:`.pinning`;
the proxy's own ``forewarn_reset`` listed: :mod:`.stops`), and a ``tools/call`` result on its way back,
after the guard read it (secrets redacted: :mod:`.redact`). Findings and redactions go to the audit
store and the proxy's log. One :class:`ToolGate` per proxy (``CallJudge.gate``); the relays call
:meth:`ToolGate.listed`, :meth:`ToolGate.listed_frame`, :meth:`ToolGate.check_call` and
:meth:`ToolGate.redacted_frame` / :meth:`ToolGate.redact`.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import mcp_types as types
import orjson
from mcp.shared.exceptions import MCPError

from . import pii
from ._lines import escape_breaks
from .audit import AuditStore
from .config import ProxyConfig
from .descriptions import Finding, Inspection, inspect_tools_list
from .pinning import Pins
from .redact import Redaction, redact_read, redact_result
from .stops import RESET_TOOL, reset_tool

log = logging.getLogger("forewarn.mcp")

TOOLS_REFUSED = -32023  # a tools/list answer refused: a finding whose action is "refuse" (descriptions:)


class ToolGate:
    """The proxy's gateway checks; ``audit``: where pins, findings and redactions are kept (None: pins for the
    process's life, findings in the log only); ``lists_reset``: whether the proxy lists ``forewarn_reset``."""

    def __init__(self, config: ProxyConfig, audit: AuditStore | None, *, lists_reset: bool) -> None:
        self.policy = config.descriptions
        self.redaction = config.redact
        if self.redaction.pii:  # (Presidio takes seconds to load: in a thread, while the upstream starts)
            pii.preload()
        self.audit = audit
        self.pins = Pins(audit, approve=config.approve_tool_changes)
        self.lists_reset = lists_reset
        self.described: dict[str, dict[str, Any]] = {}  # tool → {"text", "findings"}: what the state may show
        self.read_only: set[str] = set()  # tools whose annotations say readOnlyHint (unknown tools' default)
        self._blocked: dict[str, str] = {}  # tool → why a call to it is refused (hidden, or its server refused)
        self._asking: dict[str, tuple[str, str, Mapping[str, Any]]] = {}  # tool → (why, server, the tool as listed)
        self._seen: set[tuple[str, ...]] = set()  # findings recorded already (each once per process)

    # -- tools/list -----------------------------------------------------------------------

    def listed(self, server: str, result: Mapping[str, Any], *, last_page: bool = True,
               others: frozenset[str] = frozenset()) -> Inspection:
        """Judge one ``tools/list`` page of ``server`` (a key from :func:`.pinning.server_key`): the page the
        client gets, with every finding recorded and the hidden tools' calls refused from now on."""
        tools = result.get("tools")
        if not isinstance(tools, list):
            return Inspection(result, (), {}, None)
        changed = self.pins.check(server, tools) if self.policy.pin else ()
        inspection = inspect_tools_list(result, self.policy, server=server, extra=changed, others=others)
        for tool in tools:
            if isinstance(tool, Mapping) and isinstance(name := tool.get("name"), str):
                self._blocked.pop(name, None)
                self._asking.pop(name, None)
                if name in inspection.asking:
                    self._asking[name] = (inspection.asking[name], server, tool)
                kinds = sorted({f.kind for f, _ in inspection.findings if f.tool == name})
                self.described[name] = {"text": str(tool.get("description") or ""), "findings": kinds}
                annotations = tool.get("annotations")
                if isinstance(annotations, Mapping) and annotations.get("readOnlyHint") is True:
                    self.read_only.add(name)
                else:
                    self.read_only.discard(name)
                if inspection.refused is not None:
                    self._blocked[name] = inspection.refused
        self._blocked.update(inspection.hidden)
        for finding, action in inspection.findings:
            self._record(server, finding, action)
        out = inspection.result
        if self.lists_reset and last_page and inspection.refused is None and isinstance(out.get("tools"), list) \
                and not any(isinstance(t, Mapping) and t.get("name") == RESET_TOOL for t in out["tools"]):
            out = {**out, "tools": [*out["tools"], reset_tool()]}
        return Inspection(out, inspection.findings, inspection.hidden, inspection.refused, inspection.asking)

    def listed_frame(self, server: str, message: dict[str, Any], line: bytes) -> tuple[bytes, dict[str, Any]]:
        """A lean relay's ``tools/list`` answer (``message``, its bytes ``line``) as the client gets it."""
        result = message.get("result")
        if not isinstance(result, dict):
            return line, message
        seen = self.listed(server, result, last_page=not result.get("nextCursor"))
        if seen.refused is not None:
            frame = error_frame(message.get("id"), TOOLS_REFUSED, seen.refused)
            return frame, orjson.loads(frame)
        if seen.result is result:
            return line, message
        answer = {**message, "result": seen.result}
        return result_frame(message.get("id"), dict(seen.result)), answer

    def listed_page(self, server: str, page: Mapping[str, Any]) -> Mapping[str, Any]:
        """A relay's own ``tools/list`` page (its ``result``) as the gate lets it through: the hidden tools gone,
        no tools at all when the server is refused (its calls are refused saying why: :meth:`check_call`)."""
        return self.listed(server, page, last_page=False).result

    def check_call(self, name: str) -> None:
        """Refuse a call to a tool the gate hid, or of a server it refused.

        Raises:
            MCPError: ``-32602`` (invalid params, as an unknown tool) saying why and how to approve it.
        """
        why = self._blocked.get(name)
        if why is not None:
            raise MCPError(types.INVALID_PARAMS, f"{why}; the call did not run (an operator who trusts the server "
                                                 f"sets another action: --descriptions, or descriptions: in the proxy "
                                                 f"config; a changed tool is approved with forewarn mcp "
                                                 f"--approve-tool-changes)")

    def blocks(self, name: str) -> bool:
        """Whether a call to ``name`` cannot go on as it came: refused, or a person is to be asked first."""
        return name in self._blocked or name in self._asking

    def asks(self, name: str) -> str | None:
        """Why a call to ``name`` asks a person first (a finding whose action is ``ask``), else None."""
        asking = self._asking.get(name)
        return None if asking is None else asking[0]

    def approve(self, name: str) -> None:
        """A person approved the tool ``name`` as listed: pinned as it is, its calls go on unasked."""
        asking = self._asking.pop(name, None)
        if asking is not None:
            self.pins.accept(asking[1], asking[2])

    # -- tools/call results -----------------------------------------------------------------

    def redact(self, session: str, tool: str, result: Mapping[str, Any]) -> tuple[Mapping[str, Any], list[Redaction]]:
        """A call's result with its secrets redacted as the config says (recorded: kind and where, not the value)."""
        if not self.redaction.active:
            return result, []
        out, records = redact_result(result, self.redaction)
        self._note(session, tool, records)
        return out, records

    def _note(self, session: str, tool: str, records: list[Redaction]) -> None:
        if records:
            log.warning("session %s: %d value(s) redacted from the result of %r: %s", session, len(records), tool,
                        ", ".join(f"{r.kind} at {r.where}" for r in records))
            if self.audit is not None:
                self.audit.redacted(session, tool, [r.to_dict() for r in records])

    def redact_read(self, session: str, method: str, step: str, result: Mapping[str, Any]
                    ) -> tuple[Mapping[str, Any], list[Redaction]]:
        """A ``resources/read`` or ``prompts/get`` result (its step's tool name ``step``: :mod:`.reads`) with its
        secrets redacted, recorded as a call's are (after the guard read it as it came)."""
        if not self.redaction.active:
            return result, []
        out, records = redact_read(method, result, self.redaction)
        self._note(session, step, records)
        return out, records

    def redacted_frame(self, session: str, tool: str, rid: Any, result: Mapping[str, Any], frame: bytes) -> bytes:
        """A lean relay's answer ``frame`` to a call, its ``result`` redacted (the same frame when nothing was)."""
        out, records = self.redact(session, tool, result)
        return frame if not records else result_frame(rid, dict(out))

    def _record(self, server: str, finding: Finding, action: str) -> None:
        key = (server, finding.kind, finding.tool, finding.where, finding.detail, action)
        if key in self._seen:
            return
        self._seen.add(key)
        log.warning("tools/list of %s: %s in the %s of tool %r (%s): %s", server, finding.kind, finding.where,
                    finding.tool, finding.detail, action)
        if self.audit is not None:
            self.audit.finding(server, finding.to_dict(), action)


def error_frame(rid: Any, code: int, message: str) -> bytes:
    """A JSON-RPC error as the lean relays write one (on one line: ``_frames.error_frame``'s twin)."""
    return escape_breaks(orjson.dumps({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}})) + b"\n"


def result_frame(rid: Any, result: dict[str, Any]) -> bytes:
    return escape_breaks(orjson.dumps({"jsonrpc": "2.0", "id": rid, "result": result})) + b"\n"
