"""The gateway's flags of ``forewarn mcp`` (``--descriptions``, ``--redact``, ``--after-stop``), on the real command
launched as a host launches it, in front of the poisoned SDK server; a bad value is one line and exit 2."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from _gateway_server import AWS_KEY
from _mcp_support import text_of
from mcp import ClientSession, StdioServerParameters, stdio_client

SERVER = Path(__file__).with_name("_gateway_server.py")


def environment() -> dict[str, str]:
    """What a host passes on, and the checkout under test importable."""
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp")}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def test_the_flags_reach_the_proxy(model_file: Path, tmp_path: Path) -> None:
    audit = tmp_path / "audit.sqlite"
    params = StdioServerParameters(command=sys.executable, env=environment(), args=[
        "-m", "forewarn", "mcp", "--model", str(model_file), "--audit", str(audit), "--tool-kind", "vault=read_file",
        "--descriptions", "warn", "--redact", "aws_access_key,jwt", "--after-stop", "kinds", "--",
        sys.executable, str(SERVER), "stdio", str(tmp_path / "change.txt")])

    async def scenario() -> tuple[set[str], str]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            tools = {t.name for t in (await session.list_tools()).tools}
            return tools, text_of(await session.call_tool("vault", {"path": "k"}))

    tools, vault = anyio.run(scenario)
    assert tools == {"clock", "lookup", "notes", "vault", "touch", "forewarn_reset"}  # warned, not hidden
    assert AWS_KEY not in vault and "[REDACTED:aws_access_key]" in vault and "[REDACTED:jwt]" in vault
    with sqlite3.connect(audit) as conn:
        assert {a for (a,) in conn.execute("SELECT action FROM tool_findings")} == {"warn"}
        assert {k for (k,) in conn.execute("SELECT kind FROM redactions")} == {"aws_access_key", "jwt"}


@pytest.mark.parametrize(("flag", "said"), [
    ("--descriptions=explode", "descriptions.hidden_instruction: 'explode' is not an action"),
    ("--redact=aws", "redact: unknown kind(s) ['aws']"),
    ("--after-stop=never", "after_stop must be one of all, kinds, session"),
])
def test_a_bad_value_is_one_line_and_exit_2(flag: str, said: str, tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "forewarn", "mcp", "--record", str(tmp_path / "r.jsonl"), flag, "--",
                          "true"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and said in run.stderr
