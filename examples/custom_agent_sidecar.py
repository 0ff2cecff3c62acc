"""Guard your own LangChain agent through the sidecar (``forewarn serve``): the glue, following the docs alone.

The same "customer-ops" agent as ``examples/custom_agent.py``, guarded by a sidecar this script
starts on a free loopback port (with keys of its own; point ``--url``/``--key`` at yours instead).
Everything between the ``glue`` markers is what you write (at most 30 lines, counted by
``tests/langchain/test_custom_glue.py``): an async agent, ``AsyncClient`` all the way, the
session closed when the run ends.

Run: ``python examples/custom_agent_sidecar.py [--url URL --key AGENT_KEY]``
"""
from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from langchain.agents import create_agent
from langgraph.checkpoint.memory import InMemorySaver

sys.path.insert(0, str(Path(__file__).resolve().parent))
from custom_agent import SCRIPT, TOOLS, model_file


def start_sidecar(model: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    key = secrets.token_urlsafe(24)
    env = {**os.environ, "FOREWARN_API_KEYS": f"{key}:agent:customer-ops"}
    process = subprocess.Popen([sys.executable, "-m", "forewarn.server", "serve", "--model", f"ops={model}",
                                "--port", str(port), "--db", str(Path(tempfile.mkdtemp()) / "forewarn.db"),
                                "--log-level", "error"], env=env)
    from forewarn.guard.client import Client

    with Client(f"http://127.0.0.1:{port}", api_key=key) as probe:
        deadline = time.monotonic() + 60
        while not probe.ready():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the sidecar did not start")
            time.sleep(0.05)
    return process, f"http://127.0.0.1:{port}", key


async def guarded(url: str, key: str) -> None:
    # --- glue: start
    from langchain_core.messages import HumanMessage
    from langchain_core.runnables import RunnableConfig
    from langgraph.types import Command

    from forewarn.guard.client import AsyncClient
    from forewarn.guard.langchain import ForewarnMiddleware
    from forewarn.guard.toolcalls import ToolStateExtractor

    extractor = ToolStateExtractor(tool_kinds={"lookup_customer": "other", "refund": "payment"},
                                   internal_domains=["corp.example"])
    async with AsyncClient(url, api_key=key) as client:
        guard = ForewarnMiddleware(client, extractor=extractor, tools=TOOLS)
        agent = create_agent(SCRIPT, TOOLS, middleware=[guard], checkpointer=InMemorySaver())
        config: RunnableConfig = {"configurable": {"thread_id": "ticket-4711"}, "metadata": {"customer": "ann"}}
        result = await agent.ainvoke({"messages": [HumanMessage("Refund Ann's order 17 (90.00).")]}, config)
        while "__interrupt__" in result:  # Forewarn asks a human: approve, edit or reject
            request = result["__interrupt__"][0].value["action_requests"][0]
            print("asked:", request["description"])
            answer = {"type": "reject", "message": "We never delete accounts from a refund ticket."}
            result = await agent.ainvoke(Command(resume=answer), config)
        print("agent:", result["messages"][-1].content)
        run = guard.get_run("ticket-4711")
        print("run ended, its sidecar session closed:", run is not None and run.closed)
    # --- glue: end


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url")
    parser.add_argument("--key")
    options = parser.parse_args()
    process = None
    if options.url is None:
        process, options.url, options.key = start_sidecar(model_file())
    try:
        asyncio.run(guarded(options.url, options.key))
    finally:
        if process is not None:
            process.terminate()
            process.wait(15)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
