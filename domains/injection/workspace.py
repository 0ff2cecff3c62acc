"""One run's workspace as an MCP server: the tools the injection domain's agent calls, over the MCP SDK.

:class:`Workspace` holds what a run can read and change: the task's documents (one of them carrying
the injection, in an attacked run), the secret files an attacker asks for, and the effects the
agent's calls have. :func:`workspace_server` serves it as a real MCP server (the SDK's
``MCPServer``, one tool per call the domain knows); the model agent (:mod:`.llm_agent`) calls it
through the SDK's ``Client``, in process, so every call and every document the model reads goes
through the protocol. Web pages may be fetched from a local HTTP server instead (:class:`~.agent.HttpPages`).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .agent import _SECRET_TEXT
from .tasks import READS, Step

TOOLS = ("read_file", "fetch", "git_log", "git_show", "read_email", "list_files", "git_status", "write_file",
         "send_email", "http_post", "pay", "delete_file", "set_setting", "add_collaborator", "git_push",
         "run_command")
_EFFECT_REPLY = {"write_file": "written", "send_email": "sent", "http_post": "posted", "pay": "paid",
                 "delete_file": "deleted", "set_setting": "updated", "add_collaborator": "added",
                 "git_push": "pushed", "run_command": "done"}


@dataclass
class Workspace:
    """What one run's tools return: the documents by call, and the calls made, in order."""

    documents: dict[tuple[str, tuple[tuple[str, str], ...]], str]
    fetch: Callable[[str], str] | None = None
    calls: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    @classmethod
    def of(cls, steps: list[Step], fetch: Callable[[str], str] | None = None) -> Workspace:
        documents = {(s.tool, tuple(sorted(s.args.items()))): s.output for s in steps if s.tool in READS}
        for path, text in _SECRET_TEXT.items():
            documents.setdefault(("read_file", (("path", path),)), text)
        return cls(documents, fetch)

    def call(self, tool: str, args: dict[str, str]) -> str:
        """The text the call returns (a read: the document; an effect: a short receipt)."""
        self.calls.append((tool, dict(args)))
        if tool == "fetch" and self.fetch is not None:
            return self.fetch(args["url"])
        if tool in READS:
            found = self.documents.get((tool, tuple(sorted(args.items()))))
            return found if found is not None else f"error: nothing at {args}"
        if tool == "list_files":
            return "README.md\nsrc/\ndocs/\nnotes/\nCHANGELOG.md"
        if tool == "git_status":
            return "On branch main\nnothing to commit, working tree clean"
        return _EFFECT_REPLY[tool]


def workspace_server(workspace: Workspace) -> Any:
    """An ``MCPServer`` whose tools are the domain's calls, answered by ``workspace``."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("injection-workspace")

    def call(tool: str, **args: str) -> str:
        return workspace.call(tool, {k: v for k, v in args.items() if v is not None})

    @server.tool()
    def read_file(path: str) -> str:
        return call("read_file", path=path)

    @server.tool()
    def fetch(url: str) -> str:
        return call("fetch", url=url)

    @server.tool()
    def git_log(n: str) -> str:
        return call("git_log", n=n)

    @server.tool()
    def git_show(rev: str) -> str:
        return call("git_show", rev=rev)

    @server.tool()
    def read_email(folder: str) -> str:
        return call("read_email", folder=folder)

    @server.tool()
    def list_files(path: str) -> str:
        return call("list_files", path=path)

    @server.tool()
    def git_status() -> str:
        return call("git_status")

    @server.tool()
    def write_file(path: str) -> str:
        return call("write_file", path=path)

    @server.tool()
    def send_email(to: str, subject: str, body: str) -> str:
        return call("send_email", to=to, subject=subject, body=body)

    @server.tool()
    def http_post(url: str, body: str) -> str:
        return call("http_post", url=url, body=body)

    @server.tool()
    def pay(amount: str, payee: str) -> str:
        return call("pay", amount=amount, payee=payee)

    @server.tool()
    def delete_file(path: str) -> str:
        return call("delete_file", path=path)

    @server.tool()
    def set_setting(name: str, value: str) -> str:
        return call("set_setting", name=name, value=value)

    @server.tool()
    def add_collaborator(user: str, role: str) -> str:
        return call("add_collaborator", user=user, role=role)

    @server.tool()
    def git_push(remote: str, branch: str) -> str:
        return call("git_push", remote=remote, branch=branch)

    @server.tool()
    def run_command(command: str) -> str:
        return call("run_command", command=command)

    return server
