"""``forewarn demo --domain mcp``: the proxy in front of a real mcp-server-git catches a reset over
uncommitted work before it runs.

:func:`record_and_learn` is how the shipped model (``model.json``) was made: the scripted agent's
sessions (:func:`.agent.plan`) played through the proxy in recording mode against real servers
(mcp-server-git, and the npm filesystem server when it is installed), then ``learn_model`` on the
recording — record, learn, then guard, as a user starts. ``python -m forewarn.domains.mcp.demo
--record N`` makes it again.
"""
from __future__ import annotations

import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.table import Table

from ...errors import ConfigError
from ...guard.model import GuardModel
from ...guard.pipeline import learn_model
from ...guard.runtime import Guard
from ...guard.spec import load_spec
from .agent import PROXY_CONFIG, SPEC_PATH, plan, run_session

__all__ = ["MODEL_PATH", "make_repository", "record_and_learn", "run_mcp_demo"]

MODEL_PATH = Path(__file__).with_name("model.json")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def make_repository(path: Path) -> Path:
    """A throwaway repository: one commit (README.md, .env with a key), uncommitted work in notes.txt."""
    if shutil.which("git") is None:
        raise ConfigError("the MCP demo needs git on PATH")
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    _git(path, "init", "-q", "-b", "main")
    _git(path, "config", "user.email", "demo@example.com")
    _git(path, "config", "user.name", "Forewarn demo")
    (path / "README.md").write_text("# demo\n")
    (path / ".env").write_text("API_KEY=sk-live-0123456789abcdef\n")
    (path / "notes.txt").write_text("first\n")
    _git(path, "add", ".")
    _git(path, "commit", "-q", "-m", "init")
    (path / "notes.txt").write_text("first\nwork not committed yet\n")
    return path


def _servers(repo: Path) -> list[Any]:
    from ...guard.mcp import UpstreamSpec

    git = shutil.which("mcp-server-git") or str(Path(sys.executable).with_name("mcp-server-git"))
    if not Path(git).exists():
        raise ConfigError("the MCP demo needs mcp-server-git: pip install mcp-server-git")
    servers = [UpstreamSpec("git", command=git, args=("--repository", str(repo)))]
    files = shutil.which("mcp-server-filesystem")
    if files is not None and shutil.which("node") is not None:
        servers.append(UpstreamSpec("files", command=files, args=(str(repo),)))
    return servers


def record_and_learn(sessions: int, out_dir: Path, *, seed: int = 3, console: Console | None = None) -> GuardModel:
    """Record ``sessions`` scripted sessions through the proxy (recording mode) and learn the model."""
    from ...guard.mcp import GuardedProxy, in_process, load_config

    console = console or Console(stderr=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    record = out_dir / "mcp-sessions.jsonl"
    record.unlink(missing_ok=True)
    rng = random.Random(seed)

    async def main() -> None:
        done = 0
        while done < sessions:  # a fresh repository every 25 sessions: work to stage, a secret to read
            repo = make_repository(out_dir / "repo")
            servers = _servers(repo)
            proxy = GuardedProxy(None, load_config(PROXY_CONFIG, upstreams=servers), record=str(record))
            async with proxy.running() as server:
                for _ in range(min(25, sessions - done)):
                    async with in_process(server) as session:
                        await run_session(session, plan(rng, str(repo), files=len(servers) > 1))
                    done += 1
            console.print(f"recorded {done} sessions", highlight=False)

    anyio.run(main)
    return learn_model([record], load_spec(SPEC_PATH))


def run_mcp_demo(*, out_dir: Path, console: Console) -> list[dict[str, Any]]:
    """Two sessions of an agent through the proxy over a real git server: a careful one (stage, commit)
    and a careless one (look, stage, reset). Returns the calls with the proxy's verdicts (also printed)."""
    from mcp.shared.exceptions import MCPError

    from ...guard.mcp import GuardedProxy, in_process, load_config

    if not MODEL_PATH.is_file():
        raise ConfigError(f"{MODEL_PATH}: the MCP domain's model is missing (python -m forewarn.domains.mcp.demo "
                          f"--record 200 makes it)")
    repo = make_repository(Path(out_dir) / "repo")
    verdicts: list[dict[str, Any]] = []

    def seen(session_id: str, tool: str, args: Any, verdict: Any) -> None:
        verdicts.append({"tool": tool, "action": verdict.action.value, "p_unsafe": verdict.decision.p_unsafe})

    proxy = GuardedProxy(Guard(GuardModel.load(MODEL_PATH)), load_config(PROXY_CONFIG, upstreams=_servers(repo)[:1]),
                         on_decision=seen)
    r = str(repo)
    sessions: dict[str, list[tuple[str, dict[str, Any]]]] = {
        "careful": [("git_status", {"repo_path": r}), ("git_add", {"repo_path": r, "files": ["notes.txt"]}),
                    ("git_commit", {"repo_path": r, "message": "Save notes"})],
        "careless": [("git_status", {"repo_path": r}), ("git_diff_unstaged", {"repo_path": r}),
                     ("git_add", {"repo_path": r, "files": ["README.md"]}), ("git_reset", {"repo_path": r})]}
    rows: list[dict[str, Any]] = []

    async def main() -> None:
        async with proxy.running() as server:
            for name, calls in sessions.items():
                (repo / "README.md").write_text("# demo\nedited, not committed\n")
                async with in_process(server) as session:
                    for tool, args in calls:
                        before = len(verdicts)
                        try:
                            result = await session.call_tool(tool, args)
                            outcome = "held back" if result.is_error else "ran"
                        except MCPError as exc:
                            outcome = "refused: " + exc.error.message.split(":")[0]
                        verdict = verdicts[before] if len(verdicts) > before else {"action": "-", "p_unsafe": None}
                        rows.append({"session": name, **verdict, "outcome": outcome})

    anyio.run(main)
    table = Table(title="forewarn mcp in front of mcp-server-git (a real server, a throwaway repository)")
    for column in ("session", "call", "p_unsafe", "verdict", "what happened"):
        table.add_column(column)
    for row in rows:
        p = "-" if row["p_unsafe"] is None else f"{row['p_unsafe']:.0%}"
        table.add_row(row["session"], row["tool"], p, row["action"], row["outcome"])
    console.print(table)
    staged = _git(repo, "diff", "--cached", "--name-only").split()
    console.print(f"The careless session's git_reset never reached the server: {', '.join(staged) or 'nothing'} "
                  f"is still staged in {repo}.", highlight=False)
    return rows


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Record the scripted agent's sessions and learn the MCP model.")
    parser.add_argument("--record", type=int, default=200, help="sessions to record")
    parser.add_argument("--out", type=Path, default=Path("forewarn-mcp-record"))
    options = parser.parse_args()
    model = record_and_learn(options.record, options.out)
    model.save(MODEL_PATH)
    print(f"wrote {MODEL_PATH} from {model.provenance['runs']} recorded sessions")
