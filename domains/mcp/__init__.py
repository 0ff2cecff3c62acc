"""The MCP domain: an agent reaching git and a filesystem through MCP servers, behind ``forewarn mcp``.

``spec.yaml`` watches for work thrown away before it was committed (``git_reset`` /
``git_checkout`` over staged or written files) and for a file rewritten after a secret was read;
``proxy.yaml`` gives the servers' tools their kinds for the state extractor; ``agent.py`` is the
scripted agent whose recorded sessions the shipped model (``model.json``) was learned from;
``demo.py`` is ``forewarn demo --domain mcp``.
"""
from __future__ import annotations

from .agent import PROXY_CONFIG, SPEC_PATH, extractor, plan, run_session, synthetic_runs

__all__ = ["PROXY_CONFIG", "SPEC_PATH", "extractor", "plan", "run_session", "synthetic_runs"]
