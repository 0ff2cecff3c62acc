"""``GuardedProxy``: an MCP server in front of MCP servers, judging every ``tools/call``.

``tools/list``, resources and prompts pass through unchanged (one upstream: byte for byte,
cursors included; several: merged). For each ``tools/call`` the proxy previews the state the
call would lead to (:func:`.judge.judge`) and acts:

* ``allow`` — forwards the call, commits the state it led to, returns the upstream's result;
* ``reflect`` — returns the reason as the tool's result with ``isError: true``, without calling
  the upstream, so the model plans again;
* ``ask_human`` — asks through MCP elicitation when the client declared it, else as a proposal in
  the ``/console`` of the ``forewarn serve`` given (``--serve-url``); the call waits up to
  ``approval_timeout`` seconds; approval runs it, anything else (a rejection, no answer, no way
  to ask) returns ``isError: true`` saying why, and it does not run;
* ``stop`` — a JSON-RPC error (:data:`SESSION_STOPPED`) for this call and every later one of the
  session.

Upstream failures are MCP errors naming the upstream (:mod:`.upstream`); the proxy never waits
on an upstream longer than its call timeout. A session is one MCP client connection.
"""
from __future__ import annotations

import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
import mcp_types as types
import orjson
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError

from ...errors import ConfigError
from .._version import __version__
from ..policy import Policy
from ..spec import Trigger
from ._frames import declared
from .approval import elicit_of
from .audit import AuditStore
from .calls import (
    ARGUMENTS_TOO_LARGE,
    INSTRUCTIONS,
    SERVER_NAME,
    SERVER_TITLE,
    SESSION_STOPPED,
    CallJudge,
    failed_step,
    ran_step,
    unknown_tool,
)
from .config import ProxyConfig
from .gate import TOOLS_REFUSED
from .judge import DecisionHook, GuardedSession
from .pinning import server_key
from .reads import params_of, read_text, settle_read, step_of
from .stops import RESET_TOOL, reset_tool
from .upstream import Upstream

__all__ = ["SESSION_STOPPED", "ARGUMENTS_TOO_LARGE"]  # names other modules import through this one

log = logging.getLogger("forewarn.mcp")
_Read = TypeVar("_Read", types.ReadResourceResult, types.GetPromptResult)



class GuardedProxy(CallJudge):
    """The guarding proxy over ``config``'s upstreams.

    Args:
        guard: the guard (a learned, checked model and its policy), or a bundle guard. With a
            sidecar, a local copy of the model the sidecar serves (``Client.guard``).
        config: the upstreams and the settings for tool calls.
        policy: overrides the guard's thresholds; the trigger defaults to ``increase`` as in
            the LangChain middleware (a call that does not raise the risk passes).
        record: a JSONL file every session is appended to as a contract trace.
        sidecar: a :class:`~forewarn.guard.client.AsyncClient` of ``forewarn serve``: every
            committed step goes to its audit log, and ``ask_human`` without elicitation
            becomes a proposal in its console.
        model_name: the sidecar's model to use.
        on_decision: called once per judged call (see :class:`.judge.DecisionHook`); the
            place for an OpenTelemetry ``forewarn.decision`` span.
        audit: a local audit store (:class:`.audit.AuditStore`): every session, judged call and
            committed step, in the tables of ``forewarn serve``'s database. Its owner closes it.
    """

    def __init__(self, guard: Any | None, config: ProxyConfig, *, policy: Policy | None = None,
                 trigger: Trigger | str | None = None, record: str | None = None, sidecar: Any = None,
                 model_name: str | None = None, on_decision: DecisionHook | None = None,
                 audit: AuditStore | None = None) -> None:
        super().__init__(guard, config, policy=policy, trigger=trigger, record=record, sidecar=sidecar,
                         model_name=model_name, on_decision=on_decision, audit=audit)
        self.upstreams = [Upstream(spec, call_timeout=config.call_timeout, restarts=config.restarts)
                          for spec in config.upstreams]
        self._routes: dict[str, Upstream] = {}
        self._arguments: dict[str, frozenset[str]] = {}  # each tool's arguments, as its input schema names them
        self._prompt_routes: dict[str, Upstream] = {}
        self._resource_routes: dict[str, Upstream] = {}
        self._sessions: dict[int, GuardedSession] = {}
        self._locks: dict[int, anyio.Lock] = {}
        self.server: Server[Any] | None = None

    # -- running ------------------------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Server[Any]]:
        """Connect the upstreams (supervised for the context's life) and build the MCP server."""
        async with anyio.create_task_group() as tasks:
            for upstream in self.upstreams:
                await tasks.start(upstream.run)
            try:
                await self._refresh_tools(strict=True)
                self.server = self._build_server()
                yield self.server
            finally:
                self.close_sessions("proxy shut down")
                for upstream in self.upstreams:
                    upstream.close()
                # the supervisors close their connections themselves (an HTTP session is deleted, a
                # process ends); one that takes longer than this is cancelled
                tasks.cancel_scope.deadline = anyio.current_time() + 10

    def close_sessions(self, why: str) -> None:
        for key in list(self._sessions):
            self._finish(key, why)

    def _build_server(self) -> Server[Any]:
        caps = [u.capabilities() for u in self.upstreams]
        handlers: dict[str, Any] = {"on_list_tools": self._list_tools, "on_call_tool": self._call_tool}
        if any(c is not None and c.resources is not None for c in caps):
            handlers.update(on_list_resources=self._list_resources, on_read_resource=self._read_resource,
                            on_list_resource_templates=self._list_resource_templates)
        if any(c is not None and c.prompts is not None for c in caps):
            handlers.update(on_list_prompts=self._list_prompts, on_get_prompt=self._get_prompt)
        return Server(SERVER_NAME, version=__version__, title=SERVER_TITLE, instructions=INSTRUCTIONS, **handlers)

    # -- sessions -----------------------------------------------------------------------

    def _session_of(self, ctx: ServerRequestContext[Any, Any]) -> tuple[GuardedSession, anyio.Lock]:
        connection = getattr(ctx.session, "_connection", ctx.session)
        key = id(connection)
        guarded = self._sessions.get(key)
        if guarded is None:
            client = ctx.session.client_params
            guarded = self.open_session(getattr(connection, "session_id", None),
                                        client.client_info.name if client is not None else None)
            self._sessions[key] = guarded
            self._locks[key] = anyio.Lock()
            # the session ends when its connection goes (stdio: the process; HTTP: DELETE or idle timeout)
            weakref.finalize(connection, self._finish, key, "client disconnected")
        return guarded, self._locks[key]

    def _finish(self, key: int, why: str) -> None:
        guarded = self._sessions.pop(key, None)
        self._locks.pop(key, None)
        if guarded is not None:
            self.close_session(guarded, why)

    # -- tools ----------------------------------------------------------------------------

    async def _refresh_tools(self, *, strict: bool = False) -> list[types.Tool]:
        tools: list[types.Tool] = []
        routes: dict[str, Upstream] = {}
        for upstream in self.upstreams:
            try:
                listed = await upstream.list_tools()
            except MCPError as exc:
                if strict:
                    said = exc.error.message  # (an upstream given up on names itself already)
                    raise ConfigError(said if said.startswith(f"upstream {upstream.name!r}") else
                                      f"upstream {upstream.name!r}: {said}") from None
                log.warning("tools/list of upstream %r failed: %s", upstream.name, exc.error.message)
                continue
            listed = _gated(self, upstream, listed)  # (gateway: descriptions judged, tools pinned: gate.py)
            for tool in listed:
                other = routes.get(tool.name)
                if other is not None:
                    message = (f"tool {tool.name!r} is offered by upstreams {other.name!r} and {upstream.name!r}; "
                               f"front them with two proxies or drop one")
                    if strict:
                        raise ConfigError(message)
                    log.warning("%s; %r answers it", message, other.name)
                    continue
                routes[tool.name] = upstream
                tools.append(tool)
        self._routes = routes
        self._arguments = {tool.name: declared(tool.input_schema) for tool in tools}
        return tools

    async def _list_tools(self, ctx: ServerRequestContext[Any, Any],
                          params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        if len(self.upstreams) == 1:  # unchanged, cursor and all
            upstream = self.upstreams[0]
            result = await upstream.request("tools/list", lambda s: s.list_tools(params=_page(params)))
            seen = self.gate.listed(_server(upstream), result.model_dump(by_alias=True, exclude_none=True),
                                    last_page=result.next_cursor is None)  # (gateway: gate.py)
            if seen.refused is not None:
                raise MCPError(TOOLS_REFUSED, seen.refused)
            result = types.ListToolsResult.model_validate(seen.result)
            for tool in result.tools:
                self._routes[tool.name] = upstream
                self._arguments[tool.name] = declared(tool.input_schema)
            return result
        tools = await self._refresh_tools()
        if self.gate.lists_reset:  # (the proxy's own tool: stops.py)
            tools.append(types.Tool.model_validate(reset_tool()))
        return types.ListToolsResult(tools=tools)

    async def _call_tool(self, ctx: ServerRequestContext[Any, Any],
                         params: types.CallToolRequestParams) -> types.CallToolResult:
        name, args = params.name, dict(params.arguments or {})
        if name == RESET_TOOL and self.gate.lists_reset:  # (gateway: the proxy's own tool, stops.py)
            guarded, lock = self._session_of(ctx)
            async with lock:
                return types.CallToolResult.model_validate(await self.reset_call(guarded, elicit_of(ctx)))
        self.gate.check_call(name)  # (gateway: a hidden tool, a refused server: gate.py)
        self.check_size(name, args)
        if self.gate.asks(name) is not None:  # (gateway: a finding a person approves first: gate.py)
            await self.confirm_tool(self._session_of(ctx)[0], name, elicit_of(ctx))
        if name not in self._routes:
            await self._refresh_tools()
            if name not in self._routes:
                raise unknown_tool(name)
        self.check_names(name, args, self._arguments.get(name, frozenset()))
        guarded, lock = self._session_of(ctx)
        async with lock:
            go = await self.settle(guarded, name, args, elicit=elicit_of(ctx), lists=self._routes.__contains__,
                                   tools=lambda: list(self._routes))
            if isinstance(go, str):
                return _error_result(go)
            self.forwarded(guarded, go)  # (its span and audit row as the call leaves, not once it ended)
            try:
                result = await self._routes[go.name].call_tool(go.name, go.args)
            except MCPError as exc:
                await self.finish(guarded, go, failed_step(go, exc.error.message))
                raise
            words = self.words_after(guarded, await self.finish(guarded, go, ran_step(go, bool(result.is_error),
                                                                                    _text_of(result))))
            redacted, records = self.gate.redact(guarded.id, go.name, result.model_dump(by_alias=True,
                                                                                        exclude_none=True))
            if records:  # (gateway: after the guard read the result as it came: gate.py)
                result = types.CallToolResult.model_validate(redacted)
            if words is not None:
                result = result.model_copy(update={"content": [*result.content, types.TextContent(type="text",
                                                                                                   text=words)]})
            if go.edits:
                result = result.model_copy(update={"content": [
                    types.TextContent(type="text", text=" ".join(go.edits)), *result.content]})
            return result

    # -- resources and prompts: pass through ----------------------------------------------

    def _with(self, capability: str) -> list[Upstream]:
        return [u for u in self.upstreams if (c := u.capabilities()) is not None and getattr(c, capability)]

    async def _merged(self, capability: str, what: str, call: Callable[[Any, Any], Awaitable[Any]],
                      params: Any, field: str, result_type: Any) -> Any:
        owners = self._with(capability)
        if len(owners) == 1:
            return await owners[0].request(what, lambda s: call(s, _page(params)))
        items: list[Any] = []
        for upstream in owners:
            cursor: str | None = None
            while True:
                page_params: types.PaginatedRequestParams | None = (
                    types.PaginatedRequestParams(cursor=cursor) if cursor else None)

                async def page_of(session: Any, p: Any = page_params) -> Any:
                    return await call(session, p)
                page = await upstream.request(what, page_of)
                items.extend(getattr(page, field))
                cursor = page.next_cursor
                if not cursor:
                    break
        return result_type(**{field: items})

    async def _list_resources(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        result: types.ListResourcesResult = await self._merged(
            "resources", "resources/list", lambda s, p: s.list_resources(params=p), params, "resources",
            types.ListResourcesResult)
        owners = self._with("resources")
        if len(owners) == 1:
            self._resource_routes.update({str(r.uri): owners[0] for r in result.resources})
        return result

    async def _list_resource_templates(self, ctx: Any, params: types.PaginatedRequestParams | None
                                       ) -> types.ListResourceTemplatesResult:
        result: types.ListResourceTemplatesResult = await self._merged(
            "resources", "resources/templates/list", lambda s, p: s.list_resource_templates(params=p), params,
            "resource_templates", types.ListResourceTemplatesResult)
        return result

    async def _read_resource(self, ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        owners = self._with("resources")
        upstream = self._resource_routes.get(uri) or (owners[0] if len(owners) == 1 else None)
        if upstream is None:
            for candidate in owners:  # several servers: the one that lists it
                listed = await candidate.request("resources/list", lambda s: s.list_resources())
                if any(str(r.uri) == uri for r in listed.resources):
                    upstream = self._resource_routes[uri] = candidate
                    break
        if upstream is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown resource: {uri}")
        owner = upstream

        async def read(args: dict[str, Any]) -> types.ReadResourceResult:
            result: types.ReadResourceResult = await owner.request("resources/read",
                                                                   lambda s: s.read_resource(args["uri"]))
            return result
        return await self._judged_read(ctx, "resources/read", {"uri": uri}, read)

    async def _list_prompts(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        result: types.ListPromptsResult = await self._merged(
            "prompts", "prompts/list", lambda s, p: s.list_prompts(params=p), params, "prompts",
            types.ListPromptsResult)
        return result

    async def _get_prompt(self, ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        owners = self._with("prompts")
        upstream = self._prompt_routes.get(params.name) or (owners[0] if len(owners) == 1 else None)
        if upstream is None:
            for candidate in owners:
                listed = await candidate.request("prompts/list", lambda s: s.list_prompts())
                if any(p.name == params.name for p in listed.prompts):
                    upstream = self._prompt_routes[params.name] = candidate
                    break
        if upstream is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown prompt: {params.name}")
        owner = upstream

        async def get(args: dict[str, Any]) -> types.GetPromptResult:
            result: types.GetPromptResult = await owner.request(
                "prompts/get", lambda s: s.get_prompt(params.name, args["arguments"] or None))
            return result
        return await self._judged_read(ctx, "prompts/get", {"name": params.name,
                                                            "arguments": dict(params.arguments or {})}, get)

    async def _judged_read(self, ctx: Any, method: str, params: dict[str, Any],
                           fetch: Callable[[dict[str, Any]], Awaitable[_Read]]) -> _Read:
        """A resources/read or prompts/get judged as a step (:mod:`.reads`), fetched with the params as the
        judging let them through (``fetch``), and committed with the text it brought."""
        name, args = step_of(method, params)
        self.check_size(name, args)
        guarded, lock = self._session_of(ctx)
        async with lock:
            go = await settle_read(self, guarded, name, args, elicit=elicit_of(ctx))
            self.forwarded(guarded, go)
            try:
                result = await fetch(params_of(method, go))
            except MCPError as exc:
                await self.finish(guarded, go, failed_step(go, exc.error.message))
                raise
            dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
            await self.finish(guarded, go, ran_step(go, False, read_text(method, dumped)))
            redacted, records = self.gate.redact_read(guarded.id, method, go.name, dumped)
            if records:  # (gateway: after the guard read it as it came: gate.py)
                return type(result).model_validate(redacted)
            return result


def _server(upstream: Upstream) -> str:
    return server_key(upstream.name, upstream.spec.describe())


def _gated(proxy: GuardedProxy, upstream: Upstream, listed: list[types.Tool]) -> list[types.Tool]:
    """An upstream's tools as the gate lets them through (none when it refuses the server)."""
    page = {"tools": [t.model_dump(by_alias=True, exclude_none=True) for t in listed]}
    kept = proxy.gate.listed(_server(upstream), page, last_page=False).result.get("tools") or []
    return [types.Tool.model_validate(t) for t in kept]


def _page(params: types.PaginatedRequestParams | None) -> types.PaginatedRequestParams | None:
    """A client's page request as the proxy makes it of an upstream: its cursor only. The request's
    ``_meta`` belongs to the client's connection with the proxy — a 2026-07-28 client stamps its
    protocol envelope there — not to the proxy's connection with the upstream, which may serve the
    handshake era and would refuse the envelope."""
    return None if params is None or params.cursor is None else types.PaginatedRequestParams(cursor=params.cursor)


def _error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _text_of(result: types.CallToolResult) -> str:
    parts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    if result.structured_content is not None and not parts:
        parts.append(orjson.dumps(result.structured_content, default=str).decode())
    return "\n".join(parts)
