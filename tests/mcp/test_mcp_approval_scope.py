"""Issue 36 through the MCP proxy: an approval allows one call. After a person approved deleting
``db.sqlite`` (by elicitation), a read runs unasked and deleting ``users.sqlite`` is asked about again,
over the lean relay and the SDK path, in front of a real MCP server built on the official SDK."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from _mcp_support import SERVERS, Approver, connected, lean_connected, proxy_for

from _support import learn_deletes
from forewarn.guard import Guard, GuardModel
from forewarn.guard.mcp import UpstreamSpec
from forewarn.guard.policy import Policy
from forewarn.guard.spec import Thresholds

pytestmark = pytest.mark.mcp



@pytest.fixture(scope="module")
def delete_model(tmp_path_factory: pytest.TempPathFactory) -> GuardModel:
    model: GuardModel = learn_deletes(tmp_path_factory.mktemp("deletes"))
    return model


def _folder(tmp_path: Path) -> Path:
    for name in ("notes.md", "db.sqlite", "users.sqlite"):
        (tmp_path / name).write_text(name)
    return tmp_path


async def _session(client: Any) -> list[bool]:
    """read, delete (asked: approve), read, delete another (asked: refuse); whether each call ran."""
    ran = []
    for tool, path in (("read_file", "notes.md"), ("delete_file", "db.sqlite"), ("read_file", "notes.md"),
                       ("delete_file", "users.sqlite")):
        result = await client.call_tool(tool, {"path": path})
        ran.append(not result.is_error)
    return ran


@pytest.mark.parametrize("path", ["lean", "sdk"])
def test_a_second_delete_is_asked_about_again(delete_model: GuardModel, tmp_path: Path, path: str) -> None:
    folder = _folder(tmp_path)
    approver = Approver(True, False)
    guard = Guard(delete_model, policy=Policy(Thresholds(ask_human=0.5)))
    upstream = UpstreamSpec("files", command=sys.executable, args=(str(SERVERS), "files", str(folder)))

    async def scenario() -> list[bool]:
        proxy = proxy_for(guard, upstream)
        if path == "lean":
            async with lean_connected(proxy, elicitation_callback=approver) as (client, _):
                return await _session(client)
        async with proxy.running() as server, connected(server, elicitation_callback=approver) as client:
            return await _session(client)

    ran = anyio.run(scenario)
    assert [params.message.split(" with ")[0] for params in approver.asked] == [
        "Forewarn asks before the agent calls `delete_file`"] * 2
    assert '"users.sqlite"' in approver.asked[1].message and "approval covered that one call" in approver.asked[1].message
    assert ran == [True, True, True, False]
    assert not (folder / "db.sqlite").exists() and (folder / "users.sqlite").exists()
