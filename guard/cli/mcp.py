"""``forewarn mcp``: the guarding MCP proxy (the mcp extra). ``register(app)`` adds it to a typer app.

    forewarn mcp --model MODEL [--record FILE] [--serve-url URL] -- UPSTREAM_CMD ARGS...
    forewarn mcp --model MODEL --upstream-url URL
    forewarn mcp --model MODEL --config proxy.yaml [--http 127.0.0.1:8765]

Without ``--serve-url``, a model file's decisions go to a local SQLite audit store (``--audit``;
default ``$XDG_STATE_HOME/forewarn/mcp-audit.sqlite``, i.e. ``~/.local/state/forewarn/…``).
"""
from __future__ import annotations

import asyncio
import gc
import hashlib
import os
import signal
from contextlib import suppress
from pathlib import Path
from typing import Annotated, Any

import typer

from ...errors import ConfigError, ForewarnError, UsageError


def mcp(
    upstream_command: Annotated[list[str] | None, typer.Argument(
        help="The upstream MCP server to launch (stdio), after '--'.", show_default=False)] = None,
    model: Annotated[str, typer.Option(
        "--model", "-m", help="A model file (forewarn learn); with --serve-url, the name of a model the "
                              "sidecar serves ('default': its default). Without it, --record only records.")] = "",
    upstream_url: Annotated[str | None, typer.Option(
        "--upstream-url", help="The upstream MCP server's streamable HTTP URL (instead of a command).")] = None,
    config: Annotated[Path | None, typer.Option(
        "--config", "-c", help="A proxy config file (YAML or JSON): several upstreams, tool kinds, timeouts.")] = None,
    record: Annotated[Path | None, typer.Option(
        "--record", help="Append every session to this JSONL file as a contract trace (forewarn learn/ingest).")]
    = None,
    serve_url: Annotated[str | None, typer.Option(
        "--serve-url", help="A `forewarn serve` sidecar: its model decides, its audit log keeps every step, and "
                            "its /console is asked when the client cannot be (no elicitation).")] = None,
    api_key: Annotated[str | None, typer.Option(
        "--api-key", envvar="FOREWARN_API_KEY", help="The sidecar's API key (FOREWARN_API_KEY).")] = None,
    audit: Annotated[str | None, typer.Option(
        "--audit", help="SQLite file for the audit log of every judged call and every step that ran, in the tables "
                        "of `forewarn serve --db` (default without --serve-url: $XDG_STATE_HOME/forewarn/"
                        "mcp-audit.sqlite, i.e. ~/.local/state/forewarn/mcp-audit.sqlite; 'off': none).",
        show_default=False)] = None,
    http: Annotated[str | None, typer.Option(
        "--http", help="Serve streamable HTTP on HOST:PORT (path /mcp) instead of stdio.")] = None,
    tool_kind: Annotated[list[str] | None, typer.Option(
        "--tool-kind", help="NAME=KIND for the state extractor (e.g. git_status=other); repeatable.")] = None,
    unknown_tools: Annotated[str | None, typer.Option(
        "--unknown-tools", help="What a call to a tool with no kind gets: ask_human (default), reflect, stop, allow.")]
    = None,
    call_timeout: Annotated[float | None, typer.Option(
        "--call-timeout", help="Seconds a forwarded call may take (default 60).")] = None,
    approval_timeout: Annotated[float | None, typer.Option(
        "--approval-timeout", help="Seconds a call waits for a human (default 300); then it is refused.")] = None,
    descriptions: Annotated[str | None, typer.Option(
        "--descriptions", help="What a finding in a tool's description does (hidden instructions, invisible or "
                               "look-alike characters, credential paths, orders about other tools): warn, ask (a "
                               "person, at its first call), hide (the tool), refuse (the server), or off. Default: "
                               "hide the first two kinds, warn the rest; per kind in the config's 'descriptions'.")]
    = None,
    approve_tool_changes: Annotated[bool, typer.Option(
        "--approve-tool-changes", help="Pin the servers' tools as they list them now: approves a tool changed since "
                                       "it was first pinned (otherwise hidden).")] = False,
    redact: Annotated[str | None, typer.Option(
        "--redact", help="Redact secrets from tool results before the model reads them: 'secrets' (every known "
                         "token and key format, and high-entropy strings), 'pii' (personal data: e-mail, phone, card "
                         "numbers …; the pii extra), 'all' (both), KIND,KIND… (e.g. aws_access_key,jwt,email), or "
                         "'off' (default).")] = None,
    after_stop: Annotated[str | None, typer.Option(
        "--after-stop", help="What a stop refuses from then on: 'all' calls (default) or the stopped tool's 'kinds' "
                             "until a person resets the session (forewarn_reset), or the 'session' for good.")] = None,
    relay: Annotated[str, typer.Option(
        "--relay", help="How calls are carried: 'lean' passes messages through as they came and judges only "
                        "tools/call (stdio to one upstream command, or --http to one --upstream-url); 'sdk' serves "
                        "with the MCP SDK's server and clients; 'auto' (default): lean where it fits (docs/mcp.md, "
                        "Cost).")] = "auto",
) -> None:
    """Guard any MCP server: a proxy that judges every tool call before it is forwarded."""
    from .. import early_upstream

    if upstream_command and upstream_url is None and http is None and relay != "sdk":
        # (fast start: the upstream starts while the proxy loads; the lean stdio relay takes it, else discarded)
        early_upstream.launch(upstream_command[0], upstream_command[1:])
    try:
        _mcp(upstream_command, model, upstream_url, config, record, serve_url, api_key, audit, http, tool_kind,
             unknown_tools, call_timeout, approval_timeout, descriptions, approve_tool_changes, redact, after_stop,
             relay)
    finally:
        early_upstream.discard()


def _mcp(upstream_command: list[str] | None, model: str, upstream_url: str | None, config: Path | None,
         record: Path | None, serve_url: str | None, api_key: str | None, audit: str | None, http: str | None,
         tool_kind: list[str] | None, unknown_tools: str | None, call_timeout: float | None,
         approval_timeout: float | None, descriptions: str | None, approve_tool_changes: bool, redact: str | None,
         after_stop: str | None, relay: str) -> None:
    from .._extras import require

    require("mcp", "forewarn mcp")
    import anyio

    from .. import early_upstream
    from ..mcp import GuardedProxy, UpstreamSpec, config_from, load_config, serve_http, serve_stdio
    from ..mcp.stdio._transport import pipes_available
    from ..mcp.stdio.relay import lean_relay_fits

    if not model and record is None:
        raise UsageError("forewarn mcp needs --model MODEL (or --record FILE alone, to record sessions to learn from)")
    upstreams: list[UpstreamSpec] = []
    if upstream_command:
        upstreams.append(UpstreamSpec("upstream", command=upstream_command[0], args=tuple(upstream_command[1:])))
    if upstream_url:
        upstreams.append(UpstreamSpec("upstream-http" if upstreams else "upstream", url=upstream_url))
    overrides: dict[str, Any] = {"upstreams": upstreams, "unknown_tools": unknown_tools,
                                 "call_timeout": call_timeout, "approval_timeout": approval_timeout,
                                 "descriptions": descriptions, "after_stop": after_stop,
                                 "approve_tool_changes": True if approve_tool_changes else None,
                                 "redact": redact if redact in (None, "off", "secrets", "pii", "all") else redact.split(",")}
    kinds = _tool_kinds(tool_kind or [])
    proxy_config = load_config(config, **overrides) if config is not None else config_from({}, **overrides)
    if kinds:
        from dataclasses import replace

        proxy_config = replace(proxy_config, tool_kinds={**proxy_config.tool_kinds, **kinds})
    if relay not in ("auto", "lean", "sdk"):
        raise UsageError(f"--relay {relay!r}: expected 'auto', 'lean' or 'sdk'")
    single = proxy_config.upstreams[0] if len(proxy_config.upstreams) == 1 else None
    if relay == "lean" and (single is None or (single.command if http is None else single.url) is None):
        raise UsageError("--relay lean serves stdio in front of one upstream command, or --http in front of one "
                         "--upstream-url; use --relay sdk for the others (several upstreams, stdio to HTTP, HTTP to "
                         "stdio)")
    host, _, port = (http or "").rpartition(":")
    if http is not None and (not host or not port.isdigit()):
        raise UsageError(f"--http {http!r}: expected HOST:PORT, e.g. 127.0.0.1:8765")
    guard, sidecar, name = _guard(model, serve_url, api_key) if model else (None, None, None)
    store = _audit_store(audit, model, serve_url) if guard is not None else None

    async def main() -> None:
        # SIGTERM (a host closing its servers, a service manager) ends the proxy as the client's EOF does: the
        # serving task cancelled once, so its sessions are closed and recorded and its upstream stopped, then
        # the audit store closed (the finally below), and the next proxy on the file does not take it for one
        # killed outright. (Once: an anyio scope would cancel every await of that cleanup again.)
        serving, terminated = asyncio.current_task(), asyncio.Event()

        def terminate() -> None:
            if serving is not None and not terminated.is_set():
                terminated.set()
                serving.cancel()

        with suppress(NotImplementedError):  # (Windows: no signal handlers on the loop)
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, terminate)
        if not (http is None and relay != "sdk" and lean_relay_fits(proxy) and pipes_available()):
            early_upstream.discard()  # (fast start: no lean stdio relay here to take a launched upstream)
        try:
            if http is None:
                await serve_stdio(proxy, relay=relay)
            else:
                await serve_http(proxy, host=host, port=int(port), relay=relay)
        except asyncio.CancelledError:
            if not terminated.is_set() or serving is None:
                raise
            serving.uncancel()  # (SIGTERM: a normal end)

    try:  # (every exit closes the store: a failed start, SIGTERM, the client's EOF)
        proxy = GuardedProxy(guard, proxy_config, record=str(record) if record else None, sidecar=sidecar,
                             model_name=name, audit=store)
        # what lives as long as the proxy (modules, the model, the config) is set out of the cyclic collector's
        # reach: its full collections then scan what the sessions made, not the whole process (tens of ms a pass)
        gc.freeze()
        anyio.run(main, backend_options={"use_uvloop": _uvloop()})
    except BaseExceptionGroup as group:  # the proxy's task groups wrap a bad upstream's ConfigError
        mistakes = group.subgroup(lambda e: isinstance(e, ForewarnError))
        if mistakes is None:
            raise
        first: BaseException = mistakes
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from None
    finally:
        if store is not None:
            store.close()


def _uvloop() -> bool:
    """Whether uvloop (the mcp extra's, where it builds) can run the proxy's loop: on a relayed call's path
    every read, write and wake-up is a pass of the loop, and uvloop's cost about a third of asyncio's
    (docs/mcp.md, Cost). Without it the proxy runs on asyncio's own loop, alike."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def _audit_store(audit: str | None, model: str, serve_url: str | None) -> Any:
    """The local audit store: ``--audit FILE``; by default, without a sidecar, the one in the user's state
    folder; none with ``--audit off`` (or with a sidecar, whose audit log keeps the steps)."""
    if audit == "off" or (audit is None and serve_url is not None):
        return None
    from ..mcp.audit import AuditStore

    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    path = Path(audit) if audit is not None else Path(state) / "forewarn" / "mcp-audit.sqlite"
    if serve_url is not None:  # the model is the sidecar's: name it as the sidecar does
        return AuditStore(path, model_name=model, model_version="sidecar")
    document = Path(model).read_bytes()
    return AuditStore(path, model_name=Path(model).stem, model_version=hashlib.sha256(document).hexdigest()[:16])


def _tool_kinds(items: list[str]) -> dict[str, str]:
    kinds: dict[str, str] = {}
    for item in items:
        name, sep, kind = item.partition("=")
        if not sep or not name or not kind:
            raise UsageError(f"--tool-kind {item!r}: expected NAME=KIND, e.g. git_status=other")
        kinds[name] = kind
    return kinds


def _guard(model: str, serve_url: str | None, api_key: str | None) -> tuple[Any, Any, str | None]:
    """The guard that previews, the sidecar's async client (or None), and the sidecar's model name."""
    if serve_url is None:
        from ..bundle_guard import load_guard

        if not Path(model).is_file():
            raise ConfigError(f"--model {model}: no such model file (with --serve-url, MODEL names a model the "
                              f"sidecar serves)")
        return load_guard(model), None, None
    from ..client import AsyncClient, Client

    name = None if model == "default" else model
    with Client(serve_url, api_key=api_key) as client:
        guard = client.guard(name)  # a local copy of the sidecar's model: previews cost no round trip
    return guard, AsyncClient(serve_url, api_key=api_key), name


def register(app: typer.Typer) -> None:
    """Add ``mcp`` to a typer app (``forewarn.guard.cli`` does this for ``forewarn``)."""
    app.command("mcp", context_settings={"allow_interspersed_args": False})(mcp)
