"""docs/mcp.md's configuration snippets, read from the file: each one's command line is launched as
it stands (paths filled in) and a git call goes through the proxy it starts."""
from __future__ import annotations

import ast
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest
from _mcp_support import BIN, text_of
from mcp import ClientSession, StdioServerParameters, stdio_client

from forewarn.domains.mcp import PROXY_CONFIG

pytestmark = pytest.mark.mcp

DOC = Path(__file__).resolve().parents[2] / "docs" / "mcp.md"


def snippet(heading: str) -> str:
    """The first code block under the level-3 heading that starts with ``heading``."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index(f"### {heading}"):]
    match = re.search(r"```\w*\n(.*?)```", section, re.S)
    assert match is not None, heading
    return match.group(1)


def filled(text: str, model: Path, repo: Path, tmp_path: Path) -> str:
    return (text.replace("/path/to/model.json", str(model)).replace("/path/to/proxy.yaml", str(PROXY_CONFIG))
            .replace("/path/to/runs.jsonl", str(tmp_path / "runs.jsonl")).replace("/path/to/repo", str(repo)))


def executable(name: str) -> str:
    """A command as a host would find it: on PATH, else beside this Python (the test's virtualenv)."""
    return shutil.which(name) or str(BIN / name)


def launch_environment() -> dict[str, str]:
    """The host's environment: the servers' commands on PATH (this virtualenv's bin), and the checkout
    under test importable (a host passes only a few variables on to the servers it launches)."""
    env = {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


async def status_through(command: str, args: list[str], repo: Path) -> str:
    params = StdioServerParameters(command=executable(command), args=args, env=launch_environment())
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("git_status", {"repo_path": str(repo)})
        assert not result.is_error
        return text_of(result)


@pytest.mark.parametrize(("heading", "servers"), [("A desktop assistant", "mcpServers"), ("An IDE", "servers"),
                                                 ("Cursor", "mcpServers"), ("Windsurf", "mcpServers")])
def test_the_host_configs_launch_a_guarding_proxy(heading: str, servers: str, model_file: Path, repo: Path,
                                                  tmp_path: Path) -> None:
    config = json.loads(filled(snippet(heading), model_file, repo, tmp_path))
    entry = config[servers]["git"]
    assert entry["command"] == "forewarn" and entry["args"][0] == "mcp"
    assert "notes.txt" in anyio.run(status_through, entry["command"], entry["args"], repo)


def test_the_langchain_adapters_config_launches_a_guarding_proxy(model_file: Path, repo: Path,
                                                                 tmp_path: Path) -> None:
    # langchain-mcp-adapters 0.3 needs mcp<2: its connection dict is read as written and launched with the SDK
    tree = ast.parse(filled(snippet("LangChain's MCP adapters"), model_file, repo, tmp_path))
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") ==
                "MultiServerMCPClient")
    connection: dict[str, Any] = ast.literal_eval(call.args[0])["git"]
    assert connection["transport"] == "stdio"
    assert "notes.txt" in anyio.run(status_through, connection["command"], connection["args"], repo)


def test_the_openai_agents_sdk_snippet_runs_as_written(model_file: Path, repo: Path, tmp_path: Path) -> None:
    pytest.importorskip("agents.mcp", reason="the OpenAI Agents SDK (openai-agents) is not installed")
    code = filled(snippet("The OpenAI Agents SDK"), model_file, repo, tmp_path)
    code = code.replace('"command": "forewarn"', f'"command": {executable("forewarn")!r}')
    namespace: dict[str, Any] = {}
    exec(compile(code, str(DOC), "exec"), namespace)
    server = namespace["git"]
    server.params.env = launch_environment()
    direct = type(server)(params={"command": executable("mcp-server-git"), "args": ["--repository", str(repo)]},
                          client_session_timeout_seconds=30)

    async def talks_to_the_server_itself() -> str | None:
        from mcp.shared.exceptions import MCPError

        try:
            async with direct:
                await direct.list_tools()
                await direct.call_tool("git_status", {"repo_path": str(repo)})
        except MCPError as exc:
            return exc.error.message
        return None

    problem = anyio.run(talks_to_the_server_itself)
    if problem is not None:  # not the proxy's doing: the same client fails on mcp-server-git itself
        pytest.skip(f"this openai-agents cannot call mcp-server-git directly either ({problem})")

    async def scenario() -> tuple[set[str], str]:
        async with server:
            tools = {t.name for t in await server.list_tools()}
            result = await server.call_tool("git_status", {"repo_path": str(repo)})
            return tools, text_of(result)

    tools, status = anyio.run(scenario)
    assert "git_reset" in tools and "notes.txt" in status
