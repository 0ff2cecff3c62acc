"""examples/sidecar_agent.py runs as its own process against a real server."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from _sidecar import KEYS, ServerThread

ROOT = Path(__file__).resolve().parents[2]


def test_sidecar_agent_example(server: ServerThread) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "sidecar_agent.py"), "--url", server.url, "--key", KEYS["agent"],
         "--approver-key", KEYS["approver"]],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    assert "the human said rejected" in result.stdout
    assert "steps recorded; actions: ['allow', 'reflect', 'ask_human', 'allow']" in result.stdout
