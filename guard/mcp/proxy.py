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

import copy
import itertools
import logging
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
import orjson
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError

from ...errors import ConfigError
from .._version import __version__
from ..bundle_guard import BundleGuard
from ..client import ServerError
from ..policy import Policy
from ..runtime import Decision
from ..spec import Action, Trigger
from ..telemetry import record_decision
from ..thresholds import with_default_trigger
from ..toolcalls.extractor import ToolStateExtractor
from ..toolcalls.transcript import CallStatus, ToolStep, Transcript, describe_call
from .approval import Approval, ask_human
from .audit import AuditStore
from .config import ProxyConfig
from .judge import DecisionHook, GuardedSession, Verdict, held_back_text, judge, stopped_text
from .recording import SessionLog, TraceWriter
from .upstream import Upstream

__all__ = ["GuardedProxy", "SESSION_STOPPED", "ARGUMENTS_TOO_LARGE"]

log = logging.getLogger("forewarn.mcp")

SESSION_STOPPED = -32020
ARGUMENTS_TOO_LARGE = -32021
_AUDIT_STATUS = {Action.ALLOW: ("allowed", ""), Action.REFLECT: ("held", "reflect: "),
                 Action.STOP: ("held", "stop (the session is stopped): "), Action.ASK_HUMAN: ("pending", "")}
_MAX_EDITS = 5  # edits of one call judged again; past that the approvers' answer is a refusal


class GuardedProxy:
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
        if guard is not None:
            effective = with_default_trigger(policy or guard.policy, trigger)
            if policy is None and isinstance(guard, BundleGuard):  # each member keeps its own thresholds
                guard = guard.with_member_policies(lambda p: with_default_trigger(p, trigger))
            else:
                guard = guard if effective == guard.policy else guard.with_policy(effective)
        self.guard = guard
        self.config = config
        self.extractor = ToolStateExtractor(tool_kinds=dict(config.tool_kinds),
                                            argument_aliases={k: dict(v) for k, v in config.argument_aliases.items()})
        self.writer = TraceWriter(record) if record else None
        self.sidecar = sidecar
        self.model_name = model_name
        self.on_decision = on_decision
        self.audit = audit if guard is not None else None  # (recording only: nothing is judged)
        self.upstreams = [Upstream(spec, call_timeout=config.call_timeout, restarts=config.restarts)
                          for spec in config.upstreams]
        self._routes: dict[str, Upstream] = {}
        self._prompt_routes: dict[str, Upstream] = {}
        self._resource_routes: dict[str, Upstream] = {}
        self._sessions: dict[int, GuardedSession] = {}
        self._locks: dict[int, anyio.Lock] = {}
        self._counter = itertools.count(1)
        self.server: Server[Any] | None = None
        if guard is not None:  # fail now, not at the first call, when the predicates cannot read the states
            guard.session().preview(self.extractor(Transcript()))
        elif record is None:
            raise ConfigError("the proxy needs a model (--model), or --record to only record sessions")

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
        return Server("forewarn-mcp", version=__version__, title="Forewarn guarding proxy",
                      instructions="Tool calls pass through Forewarn, which may hold back a risky call "
                                   "(its result then says why) or ask a human first.", **handlers)

    # -- sessions -----------------------------------------------------------------------

    def _session_of(self, ctx: ServerRequestContext[Any, Any]) -> tuple[GuardedSession, anyio.Lock]:
        connection = getattr(ctx.session, "_connection", ctx.session)
        key = id(connection)
        guarded = self._sessions.get(key)
        if guarded is None:
            name = getattr(connection, "session_id", None) or f"mcp-{uuid.uuid4().hex[:12]}"
            # a session of its own extractor: it resumes the fold where this session's last call left it
            # (one extractor shared by concurrent sessions would fold every transcript from its start)
            guarded = GuardedSession(name, None if self.guard is None else self.guard.session(),
                                     copy.copy(self.extractor))
            initial = guarded.initial = guarded.extractor(guarded.transcript)
            client = ctx.session.client_params
            meta = {"client": client.client_info.name} if client is not None else {}
            if guarded.session is not None:
                guarded.session.observe(initial)
                if self.audit is not None:
                    self.audit.session(name, {"source": "mcp", **meta}, initial, guarded.session.history[-1])
            if self.writer is not None:
                guarded.log = SessionLog(f"{name}-{next(self._counter)}", initial, meta)
            self._sessions[key] = guarded
            self._locks[key] = anyio.Lock()
            # the session ends when its connection goes (stdio: the process; HTTP: DELETE or idle timeout)
            weakref.finalize(connection, self._finish, key, "client disconnected")
        return guarded, self._locks[key]

    def _finish(self, key: int, why: str) -> None:
        guarded = self._sessions.pop(key, None)
        self._locks.pop(key, None)
        if guarded is None:
            return
        if self.audit is not None and guarded.session is not None:
            self.audit.close_session(guarded.id, why)
        if self.writer is not None and guarded.log is not None and guarded.calls:
            outcome = "stopped" if guarded.stopped is not None else "ended"
            self.writer.write(guarded.log, outcome=outcome, ended=why)

    # -- tools ----------------------------------------------------------------------------

    async def _refresh_tools(self, *, strict: bool = False) -> list[types.Tool]:
        tools: list[types.Tool] = []
        routes: dict[str, Upstream] = {}
        for upstream in self.upstreams:
            try:
                listed = await upstream.list_tools()
            except MCPError as exc:
                if strict:
                    raise ConfigError(f"upstream {upstream.name!r}: {exc.error.message}") from None
                log.warning("tools/list of upstream %r failed: %s", upstream.name, exc.error.message)
                continue
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
        return tools

    async def _list_tools(self, ctx: ServerRequestContext[Any, Any],
                          params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        if len(self.upstreams) == 1:  # unchanged, cursor and all
            upstream = self.upstreams[0]
            result = await upstream.request("tools/list", lambda s: s.list_tools(params=_page(params)))
            for tool in result.tools:
                self._routes[tool.name] = upstream
            return result
        return types.ListToolsResult(tools=await self._refresh_tools())

    async def _call_tool(self, ctx: ServerRequestContext[Any, Any],
                         params: types.CallToolRequestParams) -> types.CallToolResult:
        name, args = params.name, dict(params.arguments or {})
        size = len(orjson.dumps(args, default=str))
        if size > self.config.max_argument_bytes:
            raise MCPError(ARGUMENTS_TOO_LARGE, f"the arguments of the call to {name!r} are {size} bytes, above the "
                                                f"proxy's limit of {self.config.max_argument_bytes}; not forwarded")
        upstream = self._routes.get(name)
        if upstream is None:
            await self._refresh_tools()
            upstream = self._routes.get(name)
            if upstream is None:
                raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {name} (no upstream of this proxy lists it)")
        guarded, lock = self._session_of(ctx)
        async with lock:
            edit_of: str | None = None  # the console proposal an approver edited into this call
            edits: list[str] = []  # what the approvers changed, told to the model with the result
            while True:
                if guarded.stopped is not None:
                    raise MCPError(SESSION_STOPPED, stopped_text(name, guarded.stopped, later=True))
                verdict, state = judge(guarded, name, args, unknown_tools=self.config.unknown_tools,
                                       fallback=self._fallback)
                self._emit(guarded, name, args, verdict)
                audited = self._audit_judged(guarded, name, args, verdict)
                if verdict.action is Action.STOP:
                    guarded.stopped = verdict
                    guarded.calls += 1
                    raise MCPError(SESSION_STOPPED, " ".join([*edits, stopped_text(name, verdict)]))
                if verdict.action is Action.REFLECT:
                    guarded.calls += 1
                    return _error_result(" ".join([*edits, held_back_text(name, args, verdict)]))
                proposal: str | None = None
                if verdict.action is Action.ASK_HUMAN:
                    answer = await self._ask(ctx, guarded, name, args, verdict, state, edit_of=edit_of)
                    if self.audit is not None and audited is not None:
                        status = "edited" if answer.edit is not None else "approved" if answer.approved else "rejected"
                        self.audit.resolved(audited, status, answer.via, answer.message, answer.edit)
                    if answer.edit is not None and len(edits) < _MAX_EDITS:
                        # judged again, as if the client had proposed the edited call
                        edited, edited_args = answer.edit
                        edits.append(f"{answer.message} Forewarn judged the edited call "
                                     f"{describe_call(edited, edited_args)} in its place.")
                        name, args, edit_of = edited, edited_args, answer.proposal
                        upstream = self._routes.get(name)
                        if upstream is None:
                            guarded.calls += 1
                            return _error_result(" ".join([*edits, f"No upstream of this proxy lists `{name}`; "
                                                                   f"the call did not run."]))
                        continue
                    if not answer.approved:
                        guarded.calls += 1
                        return _error_result(" ".join([*edits, answer.message]))
                    proposal = answer.proposal
                elif edit_of is not None and guarded.remote is not None and state is not None:
                    # an edit the guard allows: on the sidecar too, linked to the proposal it edits
                    try:
                        allowed = await guarded.remote.propose(name, dict(args), dict(state),
                                                               tools=list(self._routes), ask=False, edit_of=edit_of)
                        proposal = allowed["id"]
                    except ServerError as exc:  # the call runs all the same; its step is not linked
                        log.warning("session %s: the sidecar did not record the edited call: %s", guarded.id, exc)
                # a call a human approved or edited is theirs: marked approved, as the middleware marks it
                result = await self._forward(guarded, upstream, name, args,
                                             verdict.action is Action.ASK_HUMAN or bool(edits), proposal, audited)
                if edits:
                    result = result.model_copy(update={"content": [
                        types.TextContent(type="text", text=" ".join(edits)), *result.content]})
                return result

    async def _forward(self, guarded: GuardedSession, upstream: Upstream, name: str, args: dict[str, Any],
                       approved: bool, proposal: str | None, audited: str | None = None) -> types.CallToolResult:
        guarded.calls += 1
        try:
            result = await upstream.call_tool(name, args)
        except MCPError as exc:
            # it may have run in part: an error step (no effect but an attempted destructive command)
            await self._commit(guarded, ToolStep(name, args, CallStatus.ERROR, exc.error.message, approved=approved),
                               proposal, audited)
            raise
        step = ToolStep(name, args, CallStatus.ERROR if result.is_error else CallStatus.SUCCESS,
                        _text_of(result), approved=approved)
        after = await self._commit(guarded, step, proposal, audited)
        if after is not None and after.action in (Action.STOP, Action.REFLECT) and after.known:
            words = f"Forewarn: after this call, {after.message or 'the run is at risk'}"
            if after.action is Action.STOP:
                guarded.stopped = Verdict(Action.STOP, after)
                words += " Forewarn stopped the session: every later call is refused."
            result = result.model_copy(update={"content": [*result.content, types.TextContent(type="text",
                                                                                               text=words)]})
        return result

    async def _commit(self, guarded: GuardedSession, step: ToolStep, proposal: str | None,
                      audited: str | None = None) -> Decision | None:
        try:
            state, decision = guarded.ran(step)
        except Exception as exc:  # a result the extractor cannot read: the call ran, the state is unknown
            log.warning("session %s: cannot read the state after %r: %s", guarded.id, step.name, exc)
            return None
        if self.audit is not None and guarded.session is not None:
            self.audit.step(guarded.id, state, {"tool": step.name, "args": step.args}, guarded.session.history[-1],
                            audited)
        if self.sidecar is not None:
            remote = await self._remote(guarded)
            decision = await remote.observe(state, action={"tool": step.name, "args": step.args}, ask=False,
                                            proposal=proposal)
        return decision

    async def _remote(self, guarded: GuardedSession) -> Any:
        """The session's twin on the sidecar (created at its first commit, with its first state)."""
        if guarded.remote is None:
            assert self.guard is not None  # (a sidecar comes with its model)
            metadata = {"source": "mcp", "session": guarded.id}
            guarded.remote = await self.sidecar.session(self.guard.for_metadata(metadata).policy,
                                                        model=self.model_name, metadata=metadata)
            await guarded.remote.observe(dict(guarded.initial), ask=False)  # the state before any call
        return guarded.remote

    async def _ask(self, ctx: ServerRequestContext[Any, Any], guarded: GuardedSession, name: str,
                   args: dict[str, Any], verdict: Verdict, state: Mapping[str, Any] | None, *,
                   edit_of: str | None) -> Approval:
        remote = await self._remote(guarded) if self.sidecar is not None else None
        return await ask_human(ctx, name, args, verdict, state, remote=remote, tools=list(self._routes),
                               timeout=self.config.approval_timeout, edit_of=edit_of)

    def _audit_judged(self, guarded: GuardedSession, name: str, args: Any, verdict: Verdict) -> str | None:
        """The judged call's row in the local audit store (its proposal id), or None without one."""
        if self.audit is None or guarded.session is None:
            return None
        status, reason = _AUDIT_STATUS[verdict.action]
        return self.audit.judged(guarded.id, name, args, verdict.decision, status,
                                 reason + (verdict.decision.message or "") + verdict.note)

    def _fallback(self, tool: str, reason: str) -> Decision:
        return Decision(Action.REFLECT, None, None, "", {},
                        f"Forewarn cannot read the call to `{tool}` ({reason}).", known=False)

    def _emit(self, guarded: GuardedSession, name: str, args: Any, verdict: Verdict) -> None:
        # a forewarn.decision span, as the middleware's (a no-op unless the application configured OpenTelemetry)
        record_decision(verdict.decision, tool=name, phase="proposed", session=guarded.id, action=verdict.action)
        if self.on_decision is not None:
            try:
                self.on_decision(guarded.id, name, args, verdict)
            except Exception as exc:  # an observer must not fail the call
                log.warning("on_decision hook failed: %s", exc)

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
        result: types.ReadResourceResult = await upstream.request("resources/read", lambda s: s.read_resource(uri))
        return result

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
        result: types.GetPromptResult = await upstream.request(
            "prompts/get", lambda s: s.get_prompt(params.name, params.arguments))
        return result


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
