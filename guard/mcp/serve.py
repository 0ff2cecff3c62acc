"""Serving the proxy: over stdio (one client: a desktop or IDE host launches it) or streamable HTTP
(many clients, one session each; remote agents)."""
from __future__ import annotations

import anyio
from mcp.server.stdio import stdio_server

from .proxy import GuardedProxy

__all__ = ["serve_stdio", "serve_http"]


async def serve_stdio(proxy: GuardedProxy) -> None:
    """Serve one client on this process's standard input and output until it closes them."""
    async with proxy.running() as server, stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


async def serve_http(proxy: GuardedProxy, *, host: str = "127.0.0.1", port: int = 8765, path: str = "/mcp",
                     started: anyio.Event | None = None) -> None:
    """Serve streamable HTTP on ``http://host:port/path`` until cancelled (uvicorn in this event loop)."""
    import uvicorn

    async with proxy.running() as server:
        app = server.streamable_http_app(streamable_http_path=path, host=host)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
        web = uvicorn.Server(config)
        if started is None:
            await web.serve()
            return
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(web.serve)
            while not web.started:
                await anyio.sleep(0.01)
            started.set()
