"""Tool lists pinned on first use: a later change to a tool (a "rug pull") is a finding until approved.

The first time the proxy sees a server's tool, it keeps a hash of what the model reads of it (name,
title, description, input schema, annotations: :func:`tool_hash`) — in the audit store when there is
one (``tool_pins``: pins outlive the process), else for the process's life. A tool whose hash later
differs is a ``changed`` finding (:mod:`.descriptions` acts on it: hidden by default) until someone
approves the new version: ``forewarn mcp --approve-tool-changes`` (or ``descriptions: {approve: true}``
in code) pins what the servers list now. A tool that disappears keeps its pin; a new tool is pinned.
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Protocol

import orjson

from .descriptions import Finding

_PINNED = ("name", "title", "description", "inputSchema", "annotations")


class PinStore(Protocol):
    """Where pins are kept (:class:`.audit.AuditStore` is one): read once per server, written as they come."""

    def pins(self, server: str) -> dict[str, str]: ...

    def pin(self, server: str, tool: str, digest: str, description: str) -> None: ...


def tool_hash(tool: Mapping[str, Any]) -> str:
    """The sha256 of what the model reads of a tool (canonical JSON: sorted keys)."""
    pinned = {k: tool.get(k) for k in _PINNED if k in tool}
    return hashlib.sha256(orjson.dumps(pinned, option=orjson.OPT_SORT_KEYS, default=str)).hexdigest()


def server_key(name: str, described: str) -> str:
    """A server as its pins are keyed: its name in the config and what runs it (command line or URL)."""
    return f"{name} ({described})"


class Pins:
    """The pins of every server the proxy fronts; ``store``: where they persist (None: this process only);
    ``approve``: pin what is listed now, changed or not (the operator approved the changes)."""

    def __init__(self, store: PinStore | None = None, *, approve: bool = False) -> None:
        self.store = store
        self.approve = approve
        self._pins: dict[str, dict[str, str]] = {}

    def check(self, server: str, tools: list[Any]) -> tuple[Finding, ...]:
        """Pin the tools not pinned yet; a ``changed`` finding for each whose hash differs from its pin."""
        pins = self._pins.get(server)
        if pins is None:
            pins = self._pins[server] = self.store.pins(server) if self.store is not None else {}
        changed: list[Finding] = []
        for tool in tools:
            if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str):
                continue
            name, digest = tool["name"], tool_hash(tool)
            pinned = pins.get(name)
            if pinned == digest:
                continue
            if pinned is None or self.approve:
                pins[name] = digest
                if self.store is not None:
                    self.store.pin(server, name, digest, str(tool.get("description", "")))
                continue
            changed.append(Finding("changed", name, "the tool", f"pinned sha256 {pinned[:12]}…, now {digest[:12]}…"))
        return tuple(changed)

    def accept(self, server: str, tool: Mapping[str, Any]) -> None:
        """Pin ``tool`` as it is now (a person approved it)."""
        name, digest = str(tool.get("name")), tool_hash(tool)
        self._pins.setdefault(server, {})[name] = digest
        if self.store is not None:
            self.store.pin(server, name, digest, str(tool.get("description", "")))
