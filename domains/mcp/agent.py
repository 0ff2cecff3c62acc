"""A scripted agent for git and filesystem MCP servers: the sessions the MCP domain is learned from.

:func:`plan` draws one session's calls (a task and a noisy agent working on it): edit files and
commit them; look around and leave; tidy up with a reset or a checkout (which, over work not
committed, throws it away); read a configuration file that holds a secret and maybe rewrite it.
:func:`run_session` plays a plan through any MCP client session (a proxy's, with ``--record``,
or a server's directly); :func:`synthetic_runs` turns plans into contract traces with the same
extractor the proxy uses, without servers (for tests and quick starts).
"""
from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from ...guard.toolcalls.extractor import ToolStateExtractor
from ...guard.toolcalls.transcript import CallStatus, ToolStep, Transcript

SPEC_PATH = Path(__file__).with_name("spec.yaml")
PROXY_CONFIG = Path(__file__).with_name("proxy.yaml")

Call = tuple[str, dict[str, Any]]


def extractor() -> ToolStateExtractor:
    """The state extractor with the domain's tool kinds (proxy.yaml), as the proxy builds it."""
    config = yaml.safe_load(PROXY_CONFIG.read_text(encoding="utf-8"))
    return ToolStateExtractor(tool_kinds=config["tool_kinds"], argument_aliases=config["argument_aliases"])


def plan(rng: random.Random, repo: str, *, files: bool = True) -> list[Call]:
    """One session's calls against a repository at ``repo`` (``files``: a filesystem server is there too)."""
    calls: list[Call] = []
    task = rng.choices(["commit", "browse", "tidy", "config"] if files else ["commit", "browse", "tidy"],
                       weights=[4, 3, 3, 2] if files else [4, 3, 3])[0]
    if rng.random() < 0.7:
        calls.append(("git_status", {"repo_path": repo}))
    if task == "browse":
        calls += [("git_log", {"repo_path": repo, "max_count": 5})]
        if rng.random() < 0.5:
            calls.append(("git_diff_unstaged", {"repo_path": repo}))
        if files and rng.random() < 0.5:
            calls.append(("read_text_file", {"path": f"{repo}/README.md"}))
        return calls
    if task == "config":
        calls.append(("read_text_file", {"path": f"{repo}/.env"}))
        if rng.random() < 0.45:  # rewrites a file after reading the secret
            calls.append(("write_file", {"path": f"{repo}/.env", "content": "API_KEY=rotated\n"}))
        return calls
    # commit and tidy both start with some work: files written, or changes staged
    if files and rng.random() < 0.6:
        calls.append(("write_file", {"path": f"{repo}/notes.txt", "content": f"note {rng.randint(0, 999)}\n"}))
    calls.append(("git_add", {"repo_path": repo, "files": ["notes.txt"]}))
    if rng.random() < 0.6:
        calls.append(("git_diff_staged", {"repo_path": repo}))
    if task == "commit":
        calls.append(("git_commit", {"repo_path": repo, "message": "Add notes"}))
        if rng.random() < 0.4:  # tidying after a commit throws nothing away
            calls.append(("git_reset", {"repo_path": repo}))
        return calls
    if rng.random() < 0.35:  # the careful agent commits before it tidies
        calls.append(("git_commit", {"repo_path": repo, "message": "Save work"}))
    calls.append(rng.choice([("git_reset", {"repo_path": repo}), ("git_checkout", {"repo_path": repo,
                                                                                   "branch_name": "main"})]))
    return calls


async def run_session(session: Any, calls: list[Call]) -> list[tuple[str, bool]]:
    """Play ``calls`` through an MCP ``ClientSession``; each call's name and whether it failed (an
    ``isError`` result or an MCP error). A session the guard stops ends there."""
    from mcp.shared.exceptions import MCPError

    done: list[tuple[str, bool]] = []
    for name, args in calls:
        try:
            result = await session.call_tool(name, args)
            done.append((name, bool(result.is_error)))
        except MCPError:
            done.append((name, True))
            break
    return done


def synthetic_runs(n: int, seed: int = 0, *, repo: str = "/repo", files: bool = True) -> Iterator[dict[str, Any]]:
    """``n`` contract traces of planned sessions, states from :func:`extractor` (no servers: every
    call succeeds, a ``.env`` read is a secret by its path)."""
    rng = random.Random(seed)
    extract = extractor()
    for index in range(n):
        transcript = Transcript()
        steps: list[dict[str, Any]] = [{"state": extract(transcript)}]
        for name, args in plan(rng, repo, files=files):
            transcript = transcript.then(ToolStep(name, args, CallStatus.SUCCESS, ""))
            steps.append({"state": extract(transcript), "action": {"tool": name, "args": args}})
        yield {"id": f"synthetic-{seed}-{index}", "steps": steps, "meta": {"source": "mcp-synthetic"}}


