"""The shield in the MCP proxy (guard.enforcement: shield, docs/shield.md), in front of a real MCP server (the
SDK's, ``_servers.py files``): a second delete — a move that risks ≈ 99 % from where the session stands — is
refused before it runs, with the safer moves in the refusal; the reads and the first delete run."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from _mcp_support import SERVERS, connected, lean_connected, proxy_for, text_of
from _shield_files import learn_shield_model

from forewarn.guard import Guard, GuardModel
from forewarn.guard.mcp import UpstreamSpec

pytestmark = pytest.mark.mcp


@pytest.fixture(scope="module")
def shield_model(tmp_path_factory: pytest.TempPathFactory) -> GuardModel:
    model: GuardModel = learn_shield_model(tmp_path_factory.mktemp("shield-mcp"))
    return model


def _folder(tmp_path: Path) -> Path:
    root = tmp_path / "files"
    root.mkdir()
    for name in ("notes.md", "old.log", "db.sqlite"):
        (root / name).write_text(name)
    return root


async def _calls(client: Any) -> list[tuple[bool, str]]:
    out = []
    for tool, path in (("read_file", "notes.md"), ("delete_file", "old.log"), ("delete_file", "db.sqlite"),
                       ("read_file", "notes.md")):
        result = await client.call_tool(tool, {"path": path})
        out.append((bool(result.is_error), text_of(result)))
    return out


def _check(results: list[tuple[bool, str]], root: Path) -> None:
    assert [error for error, _ in results] == [False, False, True, False]
    refusal = results[2][1]
    assert "Shield (files): this call is blocked because its risk is at least 50%" in refusal
    assert "`delete_file` from here leads to a violation in 99% of runs [" in refusal
    assert "`read_file` keeps it at" in refusal
    assert not (root / "old.log").exists() and (root / "db.sqlite").exists()  # the blocked delete did not run


@pytest.mark.parametrize("path", ["lean", "sdk"])
def test_the_proxy_refuses_only_the_risky_move(shield_model: GuardModel, tmp_path: Path, path: str) -> None:
    root = _folder(tmp_path)
    upstream = UpstreamSpec("files", command=sys.executable, args=(str(SERVERS), "files", str(root)))

    async def scenario() -> list[tuple[bool, str]]:
        proxy = proxy_for(Guard(shield_model), upstream)
        if path == "lean":
            async with lean_connected(proxy) as (client, _):
                return await _calls(client)
        async with proxy.running() as server, connected(server) as client:
            return await _calls(client)

    _check(anyio.run(scenario), root)
