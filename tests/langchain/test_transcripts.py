"""From LangChain messages to transcripts: what counts as done, and the incremental cache."""
from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from forewarn.domains.tools import CallStatus
from forewarn.guard.langchain._messages import TranscriptCache, mark, transcript_from_messages
from forewarn.guard.langchain.testing import ScriptedChatModel, tool_calls


def call(call_id: str, name: str = "shell", **args: object) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args or {"command": "ls"}, "id": call_id}],
                     id=f"ai-{call_id}")


def result(call_id: str, text: str | list[str | dict[str, Any]] = "ok", **kwargs: object) -> ToolMessage:
    return ToolMessage(content=text, tool_call_id=call_id, id=f"tool-{call_id}", **kwargs)


def test_only_calls_that_ran_count() -> None:
    held = mark(result("c2", "held back"), {"executed": False})
    hitl = result("c3", "rejected", status="error").model_copy(update={"additional_kwargs": {
        "lc_source": "hitl_interrupt_decision", "lc_data": {"decision": "reject"}}})
    harness = HumanMessage("summary of earlier turns").model_copy(update={"additional_kwargs": {
        "lc_source": "summarization"}})
    messages = [HumanMessage("do it", id="h"), harness, call("c1"), result("c1", status="error"), call("c2"), held,
                call("c3"), hitl, call("c4"), result("c4", [{"type": "text", "text": "block"}]), call("c5")]
    transcript = transcript_from_messages(messages, approved=["c4"])
    assert transcript.user_messages == ("do it",)
    assert [(s.id, s.status, s.result, s.approved) for s in transcript.steps] == [
        ("c1", CallStatus.ERROR, "ok", False), ("c4", CallStatus.SUCCESS, "block", True)]


def test_the_cache_gives_what_a_full_read_gives_at_every_step() -> None:
    model = ScriptedChatModel(script=[tool_calls(("shell", {"command": "ls"}), ("shell", {"command": "pwd"})), "x"])
    first = model.invoke([HumanMessage("go")])
    messages = [HumanMessage("go", id="h"), first.model_copy(update={"id": "a1"})]
    id0, id1 = (c["id"] for c in first.tool_calls)
    assert id0 is not None and id1 is not None
    sequence = [*messages, result(id0), result(id1), HumanMessage("again", id="h2"), call("c9"), result("c9")]
    cache = TranscriptCache()
    for end in range(1, len(sequence) + 1):
        prefix = sequence[:end]
        assert cache.transcript(prefix) == transcript_from_messages(prefix)
    # earlier messages replaced (a summary): read again from the start
    rewritten = [HumanMessage("summary", id="s"), call("c10"), result("c10")]
    assert cache.transcript(rewritten) == transcript_from_messages(rewritten)
    assert cache.transcript(sequence) == transcript_from_messages(sequence)


def test_the_cache_reads_the_same_messages_again_alike() -> None:
    messages = [HumanMessage("go", id="h"), call("c1"), result("c1"), call("c2"), result("c2", status="error")]
    cache = TranscriptCache()
    first = cache.transcript(messages)
    again = cache.transcript(list(messages))  # nothing new since the settled prefix
    assert again == first == transcript_from_messages(messages)
    assert again.messages == messages
    # approvals still apply to calls read afresh
    longer = [*messages, call("c3"), result("c3")]
    assert cache.transcript(longer, approved=["c3"]) == transcript_from_messages(longer, approved=["c3"])
    assert cache.transcript(longer, approved=iter(["c3"])).steps[-1].approved


def test_tool_call_state_is_neutral_ground() -> None:
    """Tool-call state lives in forewarn.guard.toolcalls, which imports no framework and no domain;
    the LangChain integration and the tools domain hand out the very same types."""
    import ast
    from pathlib import Path

    import forewarn.domains.tools as tools
    import forewarn.guard.langchain as integration
    import forewarn.guard.toolcalls as toolcalls

    assert tools.Transcript is integration.Transcript is toolcalls.Transcript
    assert tools.ToolStep is integration.ToolStep is toolcalls.ToolStep
    assert tools.ExtractionError is integration.ExtractionError is toolcalls.ExtractionError
    assert tools.ToolStateExtractor is toolcalls.ToolStateExtractor
    assert isinstance(toolcalls.ToolStateExtractor(), toolcalls.StateExtractor)
    for path in Path(toolcalls.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                for name in names:
                    assert not name.startswith(("langchain", "langgraph", "mcp", "fastapi")), (path.name, name)
                    assert "domains" not in name, (path.name, name)
