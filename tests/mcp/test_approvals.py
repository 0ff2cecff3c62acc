"""ask_human: MCP elicitation when the client declares it; else a proposal in the /console of a real
``forewarn serve`` (uvicorn on 127.0.0.1) that an approver answers; no answer in time refuses."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from _mcp_support import (
    ASKING,
    Approver,
    approve_then_refuse,
    assert_approved_then_refused,
    connected,
    git,
    git_upstream,
    proxy_for,
    text_of,
)

from forewarn.guard import Guard, GuardModel
from forewarn.guard.spec import Trigger

pytestmark = pytest.mark.mcp



def test_elicitation_approves_one_call_and_refuses_another(mcp_model: GuardModel, repo: Path) -> None:
    async def scenario() -> tuple[Approver, Any, Any]:
        proxy = proxy_for(Guard(mcp_model, policy=ASKING), git_upstream(repo), trigger=Trigger.LEVEL)
        async with proxy.running() as server:
            return await approve_then_refuse(lambda approver: connected(server, elicitation_callback=approver), repo)

    assert_approved_then_refused(anyio.run(scenario), repo)


def test_no_answer_within_the_timeout_refuses_the_call(mcp_model: GuardModel, repo: Path) -> None:
    async def silent(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        await anyio.sleep(60)
        return types.ElicitResult(action="cancel")

    async def scenario() -> Any:
        proxy = proxy_for(Guard(mcp_model, policy=ASKING), git_upstream(repo), trigger=Trigger.LEVEL, approval_timeout=0.5)
        async with proxy.running() as server, connected(server, elicitation_callback=silent) as client:
            return await client.call_tool("git_add", {"repo_path": str(repo), "files": ["notes.txt"]})

    result = anyio.run(scenario)
    assert result.is_error and "got no answer within 0.5 s; the call did not run" in text_of(result)
    assert git(repo, "diff", "--cached", "--name-only") == ""


def test_an_answer_that_is_no_elicitation_result_refuses_the_call(mcp_model: GuardModel, repo: Path) -> None:
    """The SDK path, as the lean relays (test_relay_input.py): a client whose answer the SDK cannot read as an
    elicitation result (an action of none of the three) — asking failed, the call refused, not an internal error."""
    async def garbled(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult.model_construct(action="maybe")  # (unvalidated: sent as it is)

    async def scenario() -> Any:
        proxy = proxy_for(Guard(mcp_model, policy=ASKING), git_upstream(repo), trigger=Trigger.LEVEL)
        async with proxy.running() as server, connected(server, elicitation_callback=garbled) as client:
            return await client.call_tool("git_add", {"repo_path": str(repo), "files": ["notes.txt"]})

    result = anyio.run(scenario)
    assert result.is_error and "asking failed" in text_of(result) and "the call did not run" in text_of(result)
    assert git(repo, "diff", "--cached", "--name-only") == ""


sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))  # tests/server/_sidecar.py


@pytest.mark.server
def test_console_approval_on_a_real_sidecar(mcp_model: GuardModel, repo: Path, tmp_path: Path) -> None:
    from _sidecar import KEYS, ServerThread, settings
    from forewarn.guard.client import AsyncClient, Client

    model = tmp_path / "mcp-model.json"
    mcp_model.save(model)
    with ServerThread(settings(tmp_path / "db.sqlite", {"mcp": model})) as sidecar:
        guard = Guard(mcp_model, policy=ASKING)  # the same model the sidecar serves (as Client.guard gives)
        approver = Client(sidecar.url, api_key=KEYS["approver"])
        agent = AsyncClient(sidecar.url, api_key=KEYS["agent"])

        async def answer_when_pending(decision: str) -> dict[str, Any]:
            with anyio.fail_after(60):  # a call that is never proposed fails the test, never hangs it
                while True:
                    pending = await anyio.to_thread.run_sync(approver.proposals)
                    if pending:
                        return await anyio.to_thread.run_sync(
                            approver.resolve_proposal, pending[0]["id"], decision, "seen in the console")
                    await anyio.sleep(0.05)

        async def scenario() -> tuple[Any, Any]:
            # the level trigger: every call under the asking threshold goes to a human (the proxy's
            # default, increase, asks only where a call raises the risk beyond its state's interval)
            proxy = proxy_for(guard, git_upstream(repo), sidecar=agent, trigger=Trigger.LEVEL)
            proxy.model_name = "mcp"
            results = []
            async with proxy.running() as server:
                for decision, files in (("approve", ["notes.txt"]), ("reject", ["README.md"])):
                    async with anyio.create_task_group() as tasks, connected(server) as client:
                        tasks.start_soon(answer_when_pending, decision)
                        results.append(await client.call_tool("git_add", {"repo_path": str(repo), "files": files}))
            await agent.aclose()
            return results[0], results[1]

        approved, rejected = anyio.run(scenario)
        rejected_there = approver.proposals(status="rejected")
        approver.close()
    assert not approved.is_error and git(repo, "diff", "--cached", "--name-only").split() == ["notes.txt"]
    assert rejected.is_error and "An approver rejected the call to `git_add`: seen in the console" in text_of(rejected)
    assert [p["tool"] for p in rejected_there] == ["git_add"]


@pytest.mark.server
def test_a_console_edit_is_judged_again_and_asked_about_again(mcp_model: GuardModel, repo: Path,
                                                               tmp_path: Path) -> None:
    """An approver edits the call in the console: the proxy judges the edited call as if the client had
    proposed it; still in need of approval, it is proposed again (linked to the edited proposal) and runs
    once approved; the model reads that its call was edited."""
    from _sidecar import KEYS, ServerThread, settings
    from forewarn.guard.client import AsyncClient, Client

    model = tmp_path / "mcp-model.json"
    mcp_model.save(model)
    edited_args = {"repo_path": str(repo), "files": ["notes.txt"]}
    with ServerThread(settings(tmp_path / "db.sqlite", {"mcp": model})) as sidecar:
        approver = Client(sidecar.url, api_key=KEYS["approver"])
        agent = AsyncClient(sidecar.url, api_key=KEYS["agent"])

        async def answer(decision: str, **edit: Any) -> dict[str, Any]:
            with anyio.fail_after(60):
                while True:
                    pending = await anyio.to_thread.run_sync(approver.proposals)
                    if pending:
                        first: str = pending[0]["id"]

                        def resolve(proposal: str = first) -> dict[str, Any]:
                            return approver.resolve_proposal(proposal, decision, "not that file", **edit)
                        return await anyio.to_thread.run_sync(resolve)
                    await anyio.sleep(0.05)

        async def approver_edits_then_approves() -> None:
            await answer("edit", tool="git_add", arguments=edited_args)
            await answer("approve")

        async def scenario() -> Any:
            proxy = proxy_for(Guard(mcp_model, policy=ASKING), git_upstream(repo), sidecar=agent,
                              trigger=Trigger.LEVEL)
            proxy.model_name = "mcp"
            async with proxy.running() as server, anyio.create_task_group() as tasks, connected(server) as client:
                tasks.start_soon(approver_edits_then_approves)
                result = await client.call_tool("git_add", {"repo_path": str(repo), "files": ["README.md"]})
            await agent.aclose()
            return result

        result = anyio.run(scenario)
        edited = approver.proposals(status="edited")
        approved = approver.proposals(status="approved") + approver.proposals(status="executed")
        approver.close()
    assert not result.is_error
    assert "An approver edited the call to `git_add`: not that file." in text_of(result)
    assert "judged the edited call" in text_of(result)
    assert git(repo, "diff", "--cached", "--name-only").split() == ["notes.txt"]  # the edit ran, not the original
    assert [p["arguments"]["files"] for p in edited] == [["README.md"]]
    assert [p["arguments"]["files"] for p in approved] == [["notes.txt"]]
