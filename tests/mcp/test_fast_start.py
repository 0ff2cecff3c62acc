"""A fast start of ``forewarn mcp`` (issue 43): the upstream launched by the CLI before the proxy has loaded and
taken by the lean stdio relay (``early_upstream``, ``stdio/_adopted.py``), and a start that imports nothing the
lean stdio path does not need. Real processes over pipes, the poisoned SDK server as the upstream; no timing
(``bench/mcp_overhead.py --only start`` prints the figure)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import orjson
from _mcp_support import lean_connected, text_of
from mcp.client.stdio import get_default_environment

from forewarn.domains.mcp import PROXY_CONFIG
from forewarn.guard import Guard, GuardModel, early_upstream
from forewarn.guard.mcp import GuardedProxy, UpstreamSpec, load_config

SERVER = Path(__file__).with_name("_gateway_server.py")
# what the lean stdio relay does not need: learning and checking (Storm, scipy), the other commands, the other
# integrations, Presidio (redaction of personal data is off), the HTTP relay's server
NOT_NEEDED = ("stormpy", "scipy", "forewarn.guard.storm", "forewarn.guard.learning", "forewarn.guard.pipeline",
              "forewarn.guard.pac", "presidio_analyzer", "spacy", "fastapi", "langchain_core", "matplotlib",
              "forewarn.server", "forewarn.guard.evaluation", "forewarn.guard.discovery", "forewarn.guard.llmcheck",
              "forewarn.guard.langchain", "pyspark", "pyarrow", "torch")


def test_the_default_environment_is_the_sdks() -> None:
    assert early_upstream.default_environment() == get_default_environment()


def test_a_launched_upstream_no_relay_took_is_ended() -> None:
    early_upstream.launch(sys.executable, ["-c", "import sys; sys.stdin.read()"])
    assert early_upstream.take(sys.executable, ["-c", "other"], None, None) is None
    assert early_upstream.take(sys.executable, ["-c", "import sys; sys.stdin.read()"], {"A": "1"}, None) is None
    proc = early_upstream._launched[(sys.executable, ("-c", "import sys; sys.stdin.read()"))]
    early_upstream.discard()
    assert proc.returncode is not None and not early_upstream._launched


def test_the_proxy_on_pipes_relays_to_the_upstream_it_launched_first_and_imports_no_more(
        model_file: Path, tmp_path: Path) -> None:
    log = tmp_path / "stderr.txt"  # (a file: the import lines fill a pipe's buffer while we read its answers)
    with log.open("wb") as errors:
        proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "forewarn", "mcp", "--model", str(model_file),
                                 "--tool-kind", "clock=other", "--audit", "off", "--", sys.executable, str(SERVER),
                                 "stdio", str(tmp_path / "change.txt")],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors)
    assert proc.stdin is not None and proc.stdout is not None
    hello = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "clock", "arguments": {}}}
    try:
        proc.stdin.write(orjson.dumps(hello) + b"\n")
        proc.stdin.flush()
        answers = [orjson.loads(proc.stdout.readline())]
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n' + orjson.dumps(call) + b"\n")
        proc.stdin.flush()
        answers.append(orjson.loads(proc.stdout.readline()))
    finally:
        proc.stdin.close()
        proc.wait(timeout=120)
        proc.stdout.close()
    assert answers[0]["id"] == 0 and "capabilities" in answers[0]["result"]
    assert answers[1]["result"]["content"][0]["text"] == "12:00"
    imported = {line.split("|")[-1].strip() for line in log.read_text().splitlines() if line.startswith("import time:")}
    assert sorted(m for m in imported if m.split(".")[0] in {n.split(".")[0] for n in NOT_NEEDED}
                  and any(m == n or m.startswith(n + ".") for n in NOT_NEEDED)) == []


def test_the_lean_relay_takes_the_launched_upstream_and_ends_it(mcp_model: GuardModel, tmp_path: Path) -> None:
    """In this process: launched before the relay starts, taken by it (none left to discard), served through
    the SDK's client — tools listed, a call answered — and ended with the session as one it started is."""
    args = (str(SERVER), "stdio", str(tmp_path / "change.txt"))
    early_upstream.launch(sys.executable, args)
    proc = early_upstream._launched[(sys.executable, args)]
    config = load_config(PROXY_CONFIG, upstreams=[UpstreamSpec("poisoned", command=sys.executable, args=args)],
                         tool_kinds={"clock": "other"}, argument_aliases={})
    proxy = GuardedProxy(Guard(mcp_model), config)

    async def scenario() -> tuple[set[str], str, bool]:
        async with lean_connected(proxy) as (client, _):
            listed = {t.name for t in (await client.list_tools()).tools}
            taken = not early_upstream._launched
            return listed, text_of(await client.call_tool("clock", {})), taken

    try:
        listed, clock, taken = anyio.run(scenario)
    finally:
        early_upstream.discard()
    assert taken and clock == "12:00" and {"clock", "vault"} <= listed
    assert proc.wait(timeout=30) is not None  # (the relay stopped it when the session ended)
