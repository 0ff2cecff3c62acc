"""Guard your own LangChain agent in process: the glue, following docs/langchain.md alone.

A "customer-ops" agent (4 tools: look up a customer, refund, e-mail, delete an account) on
a scripted chat model, so it runs offline. Everything between the ``glue`` markers is what
you write to guard it (``tests/langchain/test_custom_glue.py`` counts it: at most 30 lines);
the rest is the agent you already have. ``delete_account`` has no kind the extractor knows,
so its calls are never silently allowed: a human is asked, and here says no.

Run: ``python examples/custom_agent.py [MODEL.json]`` (default: learn the tool domain's model now).
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from langchain.agents import create_agent
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from forewarn.guard.langchain.testing import ScriptedChatModel, tool_calls


@tool
def lookup_customer(email: str) -> str:
    """Look a customer up."""
    return f"{email}: order 17, paid 90.00"


@tool
def refund(order: str, amount: float) -> str:
    """Refund an order."""
    return f"refunded {amount} on {order}"


@tool
def send_email(to: str, subject: str, body: str) -> str:
    """Send an e-mail."""
    return "sent"


@tool
def delete_account(email: str) -> str:
    """Delete a customer's account."""
    return "deleted"


TOOLS = [lookup_customer, refund, send_email, delete_account]
SCRIPT = ScriptedChatModel(script=[
    tool_calls(("lookup_customer", {"email": "ann@corp.example"})),
    tool_calls(("refund", {"order": "17", "amount": 90.0})),
    tool_calls(("delete_account", {"email": "ann@corp.example"})),
    "Refunded order 17; the account was kept.",
])


def model_file() -> Path:
    if len(sys.argv) > 1:
        return Path(sys.argv[1])
    if os.environ.get("FOREWARN_EXAMPLE_MODEL_FILE"):
        return Path(os.environ["FOREWARN_EXAMPLE_MODEL_FILE"])
    from forewarn.domains.tools import generate_traces, load_tool_spec
    from forewarn.guard import learn_model

    runs = Path(tempfile.mkdtemp()) / "runs.jsonl"
    generate_traces(1500, seed=0, path=runs)
    return learn_model([runs], load_tool_spec()).save(runs.with_name("model.json"))


def main() -> int:
    path = model_file()
    # --- glue: start
    from langchain_core.messages import HumanMessage
    from langchain_core.runnables import RunnableConfig
    from langgraph.types import Command

    from forewarn import Guard
    from forewarn.guard.langchain import ForewarnMiddleware
    from forewarn.guard.toolcalls import ToolStateExtractor

    extractor = ToolStateExtractor(tool_kinds={"lookup_customer": "other", "refund": "payment"},
                                   internal_domains=["corp.example"])
    guard = ForewarnMiddleware(Guard.load(path), extractor=extractor, tools=TOOLS)
    agent = create_agent(SCRIPT, TOOLS, middleware=[guard], checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "ticket-4711"}, "metadata": {"customer": "ann"}}
    result = agent.invoke({"messages": [HumanMessage("Refund Ann's order 17 (90.00).")]}, config)
    while "__interrupt__" in result:  # Forewarn asks a human: approve, edit or reject
        request = result["__interrupt__"][0].value["action_requests"][0]
        print("asked:", request["description"])
        answer = {"type": "reject", "message": "We never delete accounts from a refund ticket."}
        result = agent.invoke(Command(resume=answer), config)
    print("agent:", result["messages"][-1].content)
    run = guard.get_run("ticket-4711")
    for step in run.interventions if run else []:
        print(f"forewarn: {step.action.value} on {step.tool} ({step.outcome})")
    # --- glue: end
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
