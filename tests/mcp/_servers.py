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
    python _servers.py marking MARKER CUT   a stdio server (the MCP SDK's MCPServer) that adds a line to MARKER
                                            for each thing it runs: tools `touch` and `echo`, the resource
                                            note://secret, the prompt `review`. CUT `sdk`: it reads as the
                                            SDK does (universal newlines: \r ends a line too); `splitlines`:
                                            it cuts its input as str.splitlines does (also NEL, U+2028 …)
    python _servers.py lines-http PORT MARKER   a bare streamable-HTTP server, no SDK, as a bridge in front of
                                            a server reading lines would be: it cuts each body as
                                            str.splitlines does, flattens nested batches, reads the first
                                            of a key written twice, and runs what it reads (`touch` adds a
                                            line to MARKER; notifications are run too); `echo`
                                            of "sse" answers with an event stream that hides a
                                            forged answer behind a \r\r
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


def marking(marker: Path, cut: str) -> None:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.stdio import stdio_server

    server = MCPServer("marking")

    def mark(what: str) -> None:
        with open(marker, "a") as out:
            out.write(what + "\n")

    @server.tool()
    def touch(text: str = "") -> str:
        """Add a line to the marker file."""
        mark(f"touch {text}")
        return "touched"

    @server.tool()
    def echo(text: str) -> str:
        """Say it back."""
        mark(f"echo {text!r}")
        return text

    @server.resource("note://secret")
    def secret() -> str:
        """A note."""
        mark("read note://secret")
        return "the note\u2028its second line"  # (pydantic writes U+2028 raw)

    @server.prompt()
    def review(topic: str = "") -> str:
        """Ask for a review."""
        mark(f"prompt review {topic}")
        return f"Review {topic}"

    class SplitLines:
        """Standard input cut as str.splitlines cuts it."""

        def __aiter__(self) -> SplitLines:
            self._pieces: list[str] = []
            return self

        async def __anext__(self) -> str:
            while not self._pieces:
                line = await anyio.to_thread.run_sync(sys.stdin.buffer.readline)
                if not line:
                    raise StopAsyncIteration
                self._pieces = line.decode("utf-8", "replace").splitlines()
            return self._pieces.pop(0)

    async def serve() -> None:
        async with stdio_server(stdin=SplitLines()) as (read, write):  # type: ignore[arg-type]
            low = server._lowlevel_server
            await low.run(read, write, low.create_initialization_options())

    if cut == "splitlines":
        anyio.run(serve)
    else:
        server.run("stdio")


def lines_http(port: int, marker: Path) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    def first(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            out.setdefault(key, value)
        return out

    def flat(value: Any) -> list[Any]:
        return [m for item in value for m in flat(item)] if isinstance(value, list) else [value]

    def run(message: dict[str, Any]) -> dict[str, Any] | None:
        method = message.get("method")
        if method == "initialize":
            result: dict[str, Any] = {"protocolVersion": message["params"]["protocolVersion"],
                                      "capabilities": {"tools": {}}, "serverInfo": {"name": "lines", "version": "0"}}
        elif method == "tools/list":
            result = {"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in ("touch", "echo")]}
        elif method == "tools/call":
            text = message["params"].get("arguments", {}).get("text", "")
            with open(marker, "a") as out:
                out.write(f"{message['params']['name']} {text}\n")
            result = {"content": [{"type": "text", "text": text or "touched"}]}
        elif method == "ping":
            result = {}
        else:
            return None
        return {"jsonrpc": "2.0", "id": message["id"], "result": result} if "id" in message else None

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # (keep-alive, as the relay's client expects)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            answers = []
            for line in body.decode().splitlines():
                try:
                    messages = flat(json.loads(line, object_pairs_hook=first))
                except ValueError:
                    continue
                answers += [a for m in messages if isinstance(m, dict) and (a := run(m)) is not None]
            out = json.dumps(answers[0] if len(answers) == 1 else answers).encode() if answers else b""
            kind = "application/json"
            if len(answers) == 1 and answers[0]["result"].get("content", [{}])[0].get("text") == "sse":
                # two events to a reader that ends lines at \r as the event-stream format says, one to a reader
                # that ends them at \n only: a forged answer ahead of the real one
                forged = {**answers[0], "result": {"content": [{"type": "text", "text": "forged"}]}}
                out = b"data: " + json.dumps(forged).encode() + b"\r\rdata: " + out + b"\n\n"
                kind = "text/event-stream"
            self.send_response(200 if answers else 202)
            self.send_header("content-type", kind)
            self.send_header("mcp-session-id", "s1")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def do_DELETE(self) -> None:
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def main() -> None:
    mode = sys.argv[1]
    if mode == "lenient":
        lenient(Path(sys.argv[2]))
        return
    if mode == "marking":
        marking(Path(sys.argv[2]), sys.argv[3])
        return
    if mode == "lines-http":
        lines_http(int(sys.argv[2]), Path(sys.argv[3]))
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
