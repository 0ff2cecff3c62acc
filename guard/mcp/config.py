"""What the proxy fronts and how it judges: upstream servers, tool kinds, timeouts.

One upstream comes from the command line (``-- COMMAND ARGS`` or ``--upstream-url URL``);
several come from a config file (``--config FILE``, YAML or JSON)::

    servers:                      # also read under "mcpServers", the desktop hosts' key
      git:
        command: uvx
        args: [mcp-server-git, --repository, /work/repo]
      files:
        command: npx
        args: [-y, "@modelcontextprotocol/server-filesystem", /work/repo]
      remote:
        url: http://127.0.0.1:9000/mcp
        timeout: 30              # seconds a tools/call may take (default: call_timeout)
    tool_kinds:                   # tool → kind for the state extractor (guard/toolcalls/kinds.py)
      git_status: other
      write_file: write_file
    argument_aliases: {}          # per tool: its argument names → the ones its kind reads
    unknown_tools: ask_human      # a tool with no kind: ask_human (default), reflect, stop or allow
    resource_kinds:               # resource URI → kind: a resources/read is judged as a call of the
      file:///work/repo/README.md: read_file   # tool "resources/read:URI" with arguments {uri: URI}
    prompt_kinds:                 # prompt name → kind: a prompts/get as a call of "prompts/get:NAME"
      review: other               # with the prompt's arguments
    unknown_resources: reflect    # a resource or prompt with no kind (default: as unknown_tools)
    unknown_prompts: reflect
    call_timeout: 60
    approval_timeout: 300
    descriptions: {hidden_instruction: hide, sensitive_reference: warn}  # tool descriptions judged (descriptions.py)
    redact: secrets               # secrets in tool results redacted (redact.py); default off
    after_stop: all               # what a stop refuses from then on: all, kinds, session (stops.py)
    reset_asks: true              # forewarn_reset asks a person (false: the call itself resets)
    read_only_hints: true         # a tool with no kind whose annotations say readOnlyHint is allowed and recorded

Every tool name must be listed by one upstream only (two servers offering ``read_file`` is an
error naming both, not a silent pick).
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ...errors import ConfigError
from ..spec import Action
from ..toolcalls.kinds import ARGUMENT_NAMES, ToolKind
from .descriptions import DescriptionPolicy
from .redact import RedactPolicy


def resource_tool(uri: str) -> str:
    """The tool a ``resources/read`` of ``uri`` is judged and recorded as (its arguments: ``{"uri": uri}``)."""
    return f"resources/read:{uri}"


def prompt_tool(name: str) -> str:
    """The tool a ``prompts/get`` of the prompt ``name`` is judged and recorded as (its arguments: the prompt's)."""
    return f"prompts/get:{name}"


_RESOURCE, _PROMPT = resource_tool(""), prompt_tool("")


@dataclass(frozen=True, slots=True)
class UpstreamSpec:
    """One upstream MCP server: a command to launch (stdio) or a URL (streamable HTTP)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    timeout: float | None = None  # a tools/call's limit; None: the proxy's call_timeout

    def __post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise ConfigError(f"upstream {self.name!r}: give exactly one of 'command' (stdio) and 'url' "
                              f"(streamable HTTP)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ConfigError(f"upstream {self.name!r}: url {self.url!r} is not an http(s) URL")
        if self.timeout is not None and not self.timeout > 0:
            raise ConfigError(f"upstream {self.name!r}: timeout must be a positive number of seconds, "
                              f"got {self.timeout!r}")

    def describe(self) -> str:
        return self.url if self.url is not None else " ".join((self.command or "", *self.args))


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """How the proxy runs: its upstreams and the guard's settings for tool calls.

    Attributes:
        upstreams: the servers fronted (one name per server).
        tool_kinds: tool name → kind, on top of the extractor's defaults; a tool listed as
            ``other`` is known and harmless, one not listed anywhere is unknown.
        argument_aliases: per tool, its argument names → the canonical ones its kind reads.
        unknown_tools: what a call to an unknown tool gets when the guard would allow it.
        call_timeout: seconds a forwarded tools/call may take before it is an MCP error.
        approval_timeout: seconds a call waits for a human (elicitation or the console);
            no answer by then is a rejection.
        max_argument_bytes: a call whose arguments encode to more bytes is refused unread.
        restarts: how many times a crashed stdio upstream is restarted before it is reported down.
        resource_kinds, prompt_kinds: resource URI or prompt name → kind. Reading a resource or getting a
            prompt is a step the guard judges and records like a tool call (:func:`resource_tool`,
            :func:`prompt_tool`): what it fetches enters the agent's context as a tool's result does.
        unknown_resources, unknown_prompts: as ``unknown_tools`` for a resource or prompt with no kind
            (None: ``unknown_tools``).
        descriptions: what each finding in a tool's description does (:mod:`.descriptions`), and pinning.
        approve_tool_changes: pin the tools as listed now, changed or not (the operator approved them).
        redact: what is redacted from tool results before the model reads them (:mod:`.redact`; default none).
        after_stop: what a stop refuses from then on: ``all`` calls or the stopped ``kinds`` until a person
            resets the session, or the whole ``session`` for good (:mod:`.stops`).
        reset_asks: whether ``forewarn_reset`` asks a person (False: calling it resets).
        read_only_hints: a tool with no kind whose annotations say ``readOnlyHint`` is allowed (and recorded)
            where ``unknown_tools`` would apply.
    """

    upstreams: tuple[UpstreamSpec, ...]
    tool_kinds: Mapping[str, str] = field(default_factory=dict)
    argument_aliases: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    unknown_tools: Action = Action.ASK_HUMAN
    call_timeout: float = 60.0
    approval_timeout: float = 300.0
    max_argument_bytes: int = 1 << 20
    restarts: int = 3
    resource_kinds: Mapping[str, str] = field(default_factory=dict)
    prompt_kinds: Mapping[str, str] = field(default_factory=dict)
    unknown_resources: Action | None = None
    unknown_prompts: Action | None = None
    descriptions: DescriptionPolicy = field(default_factory=DescriptionPolicy)
    approve_tool_changes: bool = False
    redact: RedactPolicy = field(default_factory=RedactPolicy)
    after_stop: str = "all"
    reset_asks: bool = True
    read_only_hints: bool = True

    def unknown_for(self, name: str) -> Action:
        """What a call of ``name`` gets when the guard would allow it and its kind is unknown."""
        if name.startswith(_RESOURCE) and self.unknown_resources is not None:
            return self.unknown_resources
        if name.startswith(_PROMPT) and self.unknown_prompts is not None:
            return self.unknown_prompts
        return self.unknown_tools

    def step_kinds(self) -> dict[str, str]:
        """Every step's kind for the extractor: the tools', and the resources' and prompts' as their tools'."""
        return {**self.tool_kinds, **{resource_tool(u): k for u, k in self.resource_kinds.items()},
                **{prompt_tool(p): k for p, k in self.prompt_kinds.items()}}

    def step_aliases(self) -> dict[str, dict[str, str]]:
        """Every step's argument aliases: a resource whose kind reads a ``path`` reads it from its ``uri``."""
        aliases = {k: dict(v) for k, v in self.argument_aliases.items()}
        for uri, kind in self.resource_kinds.items():
            if any(field == "path" for field, _, _ in ARGUMENT_NAMES[ToolKind(kind)]):
                aliases.setdefault(resource_tool(uri), {"uri": "path"})
        return aliases

    def __post_init__(self) -> None:
        if not self.upstreams:
            raise ConfigError("the proxy needs an upstream server: '-- COMMAND ARGS', --upstream-url URL, "
                              "or 'servers' in --config")
        names = [u.name for u in self.upstreams]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ConfigError(f"upstream names must differ; repeated: {twice}")
        for label, value in (("call_timeout", self.call_timeout), ("approval_timeout", self.approval_timeout)):
            if not value > 0:
                raise ConfigError(f"{label} must be a positive number of seconds, got {value!r}")
        if self.max_argument_bytes < 1:
            raise ConfigError(f"max_argument_bytes must be at least 1, got {self.max_argument_bytes!r}")
        if self.after_stop not in ("all", "kinds", "session"):
            raise ConfigError(f"after_stop must be one of all, kinds, session; got {self.after_stop!r}")
        if self.restarts < 0:
            raise ConfigError(f"restarts must not be negative, got {self.restarts!r}")
        for label, kinds in (("tool_kinds", self.tool_kinds), ("resource_kinds", self.resource_kinds),
                             ("prompt_kinds", self.prompt_kinds)):
            for tool, kind in kinds.items():
                if kind not in {k.value for k in ToolKind}:
                    known = ", ".join(k.value for k in ToolKind)
                    raise ConfigError(f"{label}[{tool!r}] = {kind!r} is not a tool kind; known: {known}")


def load_config(path: str | Path, **overrides: Any) -> ProxyConfig:
    """Read a proxy config file (YAML or JSON); ``overrides`` (not None) win over its settings.

    Raises:
        ConfigError: the file cannot be read, or a field is wrong (named with the file).
    """
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read the proxy config: {exc.strerror}") from exc
    try:
        data = json.loads(text) if source.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"{source}: not valid {'JSON' if source.endswith('.json') else 'YAML'}: "
                          f"{' '.join(str(exc).split())}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the proxy config must be a mapping, got {type(data).__name__}")
    try:
        return config_from(data, **overrides)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


_KEYS = {"servers", "mcpServers", "tool_kinds", "argument_aliases", "unknown_tools", "call_timeout",
         "approval_timeout", "max_argument_bytes", "restarts", "resource_kinds", "prompt_kinds", "unknown_resources",
         "unknown_prompts", "descriptions", "approve_tool_changes", "redact", "after_stop", "reset_asks",
         "read_only_hints"}


def config_from(data: Mapping[str, Any], **overrides: Any) -> ProxyConfig:
    """A :class:`ProxyConfig` from a decoded config document."""
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise ConfigError(f"unknown field(s) {unknown}; known: {sorted(_KEYS)}")
    servers = data.get("servers", data.get("mcpServers")) or {}
    if not isinstance(servers, dict):
        raise ConfigError(f"field 'servers': expected a mapping of name → server, got {type(servers).__name__}")
    upstreams = tuple(_upstream(str(name), entry) for name, entry in servers.items())
    settings: dict[str, Any] = {k: v for k, v in data.items() if k in _KEYS - {"servers", "mcpServers"}}
    settings.update({k: v for k, v in overrides.items() if v is not None})
    if "upstreams" in settings:
        upstreams = tuple(settings.pop("upstreams")) + upstreams
    for key in ("unknown_tools", "unknown_resources", "unknown_prompts"):
        if key in settings:
            try:
                settings[key] = Action(settings[key])
            except ValueError:
                raise ConfigError(f"field {key!r}: {settings[key]!r} is not an action; "
                                  f"one of {[a.value for a in Action]}") from None
    if not isinstance(settings.get("descriptions", DescriptionPolicy()), DescriptionPolicy):
        settings["descriptions"] = DescriptionPolicy.from_config(settings["descriptions"])
    if not isinstance(settings.get("redact", RedactPolicy()), RedactPolicy):
        settings["redact"] = RedactPolicy.from_config(settings["redact"])
    for key in ("approve_tool_changes", "reset_asks", "read_only_hints"):
        if key in settings and not isinstance(settings[key], bool):
            raise ConfigError(f"field {key!r}: expected true or false, got {settings[key]!r}")
    for key in ("tool_kinds", "argument_aliases", "resource_kinds", "prompt_kinds"):
        if key in settings and not isinstance(settings[key], dict):
            raise ConfigError(f"field {key!r}: expected a mapping, got {type(settings[key]).__name__}")
    for key in ("call_timeout", "approval_timeout"):
        if key in settings and (not isinstance(settings[key], (int, float)) or isinstance(settings[key], bool)):
            raise ConfigError(f"field {key!r}: expected a number of seconds, got {settings[key]!r}")
    return ProxyConfig(upstreams=upstreams, **settings)


def _upstream(name: str, entry: Any) -> UpstreamSpec:
    where = f"servers.{name}"
    if not isinstance(entry, dict):
        raise ConfigError(f"field {where!r}: expected a mapping with 'command' or 'url', got {type(entry).__name__}")
    extra = sorted(set(entry) - {"command", "args", "env", "cwd", "url", "timeout", "type", "transport"})
    if extra:
        raise ConfigError(f"field {where!r}: unknown field(s) {extra}")
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, (str, int, float)) for a in args):
        raise ConfigError(f"field '{where}.args': expected a list of strings, got {args!r}")
    env = entry.get("env")
    if env is not None and not isinstance(env, dict):
        raise ConfigError(f"field '{where}.env': expected a mapping, got {type(env).__name__}")
    try:
        return UpstreamSpec(name=name, command=entry.get("command"), args=tuple(str(a) for a in args),
                            env=None if env is None else {str(k): str(v) for k, v in env.items()},
                            cwd=entry.get("cwd"), url=entry.get("url"), timeout=entry.get("timeout"))
    except TypeError as exc:
        raise ConfigError(f"field {where!r}: {exc}") from None
