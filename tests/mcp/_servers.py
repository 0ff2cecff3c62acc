"""Upstream servers for the proxy's failure tests, run as real processes:

    python _servers.py git-http PORT REPO   mcp-server-git's own server (PyPI) over streamable HTTP
    python _servers.py flaky                a stdio server (the MCP SDK's MCPServer) whose `hang` tool
                                            never answers and whose `crash` tool kills its process
    python _servers.py flaky-http PORT      the same over streamable HTTP
    python _servers.py files DIR            a stdio server (MCPServer) whose `read_file` and `delete_file` tools read
                                            and delete files in DIR
    python _servers.py lenient MARKER       a bare JSON-RPC 2.0 server on stdio, no SDK: it runs every request,
                                            notifications too (JSON-RPC servers do; they only do not answer),
                                            and its one tool `touch` adds a line to the file MARKER (called
                                            with `fail`, it answers with an error that is a bare string)
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer


def lenient(marker: Path) -> None:
    for line in sys.stdin:
        message = json.loads(line)
        method = message.get("method")
        if method == "initialize":
            result: dict[str, Any] = {"protocolVersion": message["params"]["protocolVersion"], "capabilities":
                                      {"tools": {}}, "serverInfo": {"name": "lenient", "version": "0"}}
        elif method == "tools/list":
            result = {"tools": [{"name": "touch", "inputSchema": {"type": "object"}}]}
        elif method == "tools/call":
            with open(marker, "a") as out:
                out.write(f"{message.get('id')}\n")
            result = {"content": [{"type": "text", "text": "touched"}]}
        elif method == "ping":
            result = {}
        else:
            continue
        if "id" in message:
            failed = method == "tools/call" and message["params"]["arguments"].get("fail")
            print(json.dumps({"jsonrpc": "2.0", "id": message["id"], **({"error": "boom"} if failed else
                                                                         {"result": result})}), flush=True)


def main() -> None:
    mode = sys.argv[1]
    if mode == "lenient":
        lenient(Path(sys.argv[2]))
        return
    if mode == "git-http":
        from mcp_server_git.server import create_server

        port, repo = int(sys.argv[2]), Path(sys.argv[3])
        create_server(repo).run("streamable-http", host="127.0.0.1", port=port)
        return
    from mcp.server.mcpserver import MCPServer

    if mode == "files":
        files(MCPServer("files"), Path(sys.argv[2]))
        return
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


def files(server: MCPServer, root: Path) -> None:
    @server.tool()
    def read_file(path: str) -> str:
        """Read a file."""
        return (root / path).read_text()

    @server.tool()
    def delete_file(path: str) -> str:
        """Delete a file."""
        (root / path).unlink()
        return f"deleted {path}"

    server.run("stdio")


if __name__ == "__main__":
    main()
