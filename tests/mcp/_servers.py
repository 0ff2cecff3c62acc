"""Upstream servers for the proxy's failure tests, run as real processes:

    python _servers.py git-http PORT REPO   mcp-server-git's own server (PyPI) over streamable HTTP
    python _servers.py flaky                a stdio server (the MCP SDK's MCPServer) whose `hang` tool
                                            never answers and whose `crash` tool kills its process
    python _servers.py flaky-http PORT      the same over streamable HTTP
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio


def main() -> None:
    mode = sys.argv[1]
    if mode == "git-http":
        from mcp_server_git.server import create_server

        port, repo = int(sys.argv[2]), Path(sys.argv[3])
        create_server(repo).run("streamable-http", host="127.0.0.1", port=port)
        return
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("flaky")

    @server.tool()
    def echo(text: str) -> str:
        """Say it back."""
        return text

    @server.tool()
    async def hang(seconds: float = 3600.0) -> str:
        """Never answer (sleeps; other calls are still served)."""
        await anyio.sleep(seconds)
        return "late"

    @server.tool()
    def crash() -> str:
        """Kill this server's process."""
        os._exit(3)

    if mode == "flaky-http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
