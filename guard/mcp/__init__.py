"""Forewarn in front of any MCP server: a guarding Model Context Protocol proxy (``forewarn mcp``).

The proxy is an MCP server (stdio, or streamable HTTP) whose tools are its upstream servers'
tools; every ``tools/call`` is judged on the state it would lead to before it is forwarded
(:mod:`.proxy`). Needs the ``mcp`` extra (the official MCP Python SDK).
"""
from __future__ import annotations

from .._extras import extra_error

try:
    import mcp  # noqa: F401
except ModuleNotFoundError as exc:
    raise extra_error("mcp", "forewarn.guard.mcp", exc) from None

from .approval import APPROVAL_SCHEMA, Approval
from .calls import GUARD_UNREACHABLE
from .config import ProxyConfig, UpstreamSpec, config_from, load_config
from .http.relay import HttpRelay
from .judge import DecisionHook, GuardedSession, Verdict
from .proxy import ARGUMENTS_TOO_LARGE, SESSION_STOPPED, GuardedProxy
from .reads import HELD_BACK
from .recording import SessionLog, TraceWriter
from .serve import in_process, serve_http, serve_stdio
from .stdio.relay import LeanRelay
from .upstream import UPSTREAM_DOWN, UPSTREAM_TIMEOUT, Upstream

__all__ = [
    "GuardedProxy",
    "LeanRelay",
    "HttpRelay",
    "ProxyConfig",
    "UpstreamSpec",
    "load_config",
    "config_from",
    "serve_stdio",
    "serve_http",
    "in_process",
    "Verdict",
    "DecisionHook",
    "GuardedSession",
    "Approval",
    "APPROVAL_SCHEMA",
    "SessionLog",
    "TraceWriter",
    "Upstream",
    "SESSION_STOPPED",
    "HELD_BACK",
    "ARGUMENTS_TOO_LARGE",
    "GUARD_UNREACHABLE",
    "UPSTREAM_DOWN",
    "UPSTREAM_TIMEOUT",
]
