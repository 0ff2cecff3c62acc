"""Serving the proxy: over stdio (one client: a desktop or IDE host launches it) or streamable HTTP
(many clients, one session each; remote agents)."""
from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp import ClientSession
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from ...errors import ConfigError
from .http.relay import HttpRelay, lean_http_fits
from .proxy import GuardedProxy
from .stdio._transport import parse_error, pipe_stdio, pipes_available, stdio_pipes
from .stdio.relay import LeanRelay, lean_relay_fits


async def serve_stdio(proxy: GuardedProxy, *, relay: str = "auto") -> None:
    """Serve one client on this process's standard input and output until it closes them (pipes, as hosts
    launch servers, are read and written on the event loop; anything else through the SDK's transport).

    ``relay="lean"``: frames pass through as bytes (:mod:`.stdio.relay`: one upstream launched as a command, and
    standard input and output pipes, else the SDK's server serves); ``"auto"``: lean where it fits;
    ``"sdk"``: the SDK's server."""
    if relay == "lean" or (relay == "auto" and lean_relay_fits(proxy)):
        if not lean_relay_fits(proxy):
            raise ConfigError("--relay lean serves one upstream launched as a command (stdio); this proxy has "
                              f"{len(proxy.config.upstreams)} upstream(s) — use --relay sdk")
        if pipes_available():
            lean = LeanRelay(proxy)
            async with stdio_pipes(lean.client_side) as writer:
                await lean.serve(writer)
            return
    if pipes_available():
        async with proxy.running() as server, pipe_stdio() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        return
    async with proxy.running() as server, stdio_server() as (read, write):
        checked_write, checked_read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_answer_parse_errors, read, checked_write, write)
            await server.run(checked_read, write, server.create_initialization_options())
            tasks.cancel_scope.cancel()


async def _answer_parse_errors(read: Any, forward: Any, write: Any) -> None:
    """Pass the client's messages on; answer a line that is not JSON-RPC with one parse error (JSON-RPC
    2.0: code -32700, id null), which the SDK would only log, leaving the client waiting."""
    async with forward:
        async for item in read:
            if isinstance(item, Exception):
                await write.send(parse_error(item))
                continue
            await forward.send(item)


async def serve_http(proxy: GuardedProxy, *, host: str = "127.0.0.1", port: int = 8765, path: str = "/mcp",
                     started: anyio.Event | None = None, stop: anyio.Event | None = None, relay: str = "auto",
                     idle_timeout: float | None = None) -> None:
    """Serve streamable HTTP on ``http://host:port/path`` (uvicorn in this event loop) until interrupted,
    or until ``stop`` is set; ``started`` is set once the port accepts connections.

    ``relay="lean"``: requests pass through to the one upstream reached by its URL (:mod:`.http.relay`);
    ``"auto"``: lean where it fits; ``"sdk"``: the SDK's server in front of SDK clients of the upstreams.
    ``idle_timeout``: seconds after which a session without requests is ended (None: the SDK's 30 minutes)."""
    import uvicorn

    if relay == "lean" and not lean_http_fits(proxy):
        raise ConfigError("--relay lean serves HTTP in front of one upstream reached by its URL (--upstream-url); "
                          f"this proxy has {len(proxy.config.upstreams)} upstream(s) — use --relay sdk")
    if relay != "sdk" and lean_http_fits(proxy):
        idle = {} if idle_timeout is None else {"idle_timeout": idle_timeout}
        async with HttpRelay(proxy, path=path, host=host, **idle).running() as app:
            # (no lifespan: the relay's is running()'s; its streams end there, so shutting down does not wait)
            await _uvicorn(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off",
                                          server_header=False, date_header=False, timeout_graceful_shutdown=5),
                           started, stop, app.close)
        return
    async with proxy.running() as server:
        if idle_timeout is None:
            sdk_app = server.streamable_http_app(streamable_http_path=path, host=host)
        else:
            sdk_app = server.streamable_http_app(streamable_http_path=path, host=host, session_idle_timeout=idle_timeout)
        await _uvicorn(uvicorn.Config(sdk_app, host=host, port=port, log_level="warning", lifespan="on"),
                       started, stop, None)


async def _uvicorn(config: Any, started: anyio.Event | None, stop: anyio.Event | None,
                   closing: Callable[[], None] | None) -> None:
    import uvicorn

    web = uvicorn.Server(config)

    async def watch() -> None:
        while not web.started:
            await anyio.sleep(0.01)
        if started is not None:
            started.set()
        if stop is not None:
            await stop.wait()
            if closing is not None:
                closing()
            web.should_exit = True

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(watch)
        await web.serve()
        tasks.cancel_scope.cancel()


@asynccontextmanager
async def in_process(server: Any, **client: Any) -> AsyncIterator[ClientSession]:
    """A ``ClientSession`` connected to ``server`` (``async with proxy.running() as server``) in this
    process, over memory streams: one more MCP session, as a scripted agent or a benchmark wants it.
    ``client``: ``ClientSession`` arguments (``elicitation_callback=...``)."""
    to_server, server_reads = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    server_writes, from_server = anyio.create_memory_object_stream[SessionMessage](16)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(server.run, server_reads, server_writes, server.create_initialization_options())
        async with ClientSession(from_server, to_server, **client) as session:
            await session.initialize()
            yield session
        tasks.cancel_scope.cancel()
