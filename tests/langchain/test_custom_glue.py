"""The glue a custom agent needs, in process and through the sidecar, as the examples write it from the
docs: at most 30 lines each, and it runs (issue 24)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from forewarn.guard import GuardModel

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def glue_lines(path: Path) -> list[str]:
    """The lines between the ``# --- glue`` markers that are code (not blank, not a comment)."""
    text = path.read_text().split("# --- glue: start", 1)[1].split("# --- glue: end", 1)[0]
    return [line for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


@pytest.mark.parametrize("name", ["custom_agent.py", "custom_agent_sidecar.py"])
def test_the_glue_is_at_most_30_lines_and_runs(name: str, tool_model: GuardModel, tmp_path: Path) -> None:
    lines = glue_lines(EXAMPLES / name)
    assert len(lines) <= 30, f"{name}: {len(lines)} lines of glue"
    model = tool_model.save(tmp_path / "model.json")
    args = [str(model)] if name == "custom_agent.py" else []
    env_model = {"FOREWARN_EXAMPLE_MODEL_FILE": str(model)}
    import os

    done = subprocess.run([sys.executable, "-W", "ignore", str(EXAMPLES / name), *args], capture_output=True,
                          text=True, timeout=300, check=False, env={**os.environ, **env_model}, cwd=EXAMPLES)
    assert done.returncode == 0, done.stderr
    assert "cannot place the call to `delete_account`" in done.stdout
    assert "agent: Refunded order 17; the account was kept." in done.stdout
    if name == "custom_agent.py":
        assert "forewarn: ask_human on delete_account (rejected)" in done.stdout
    else:
        assert "run ended, its sidecar session closed: True" in done.stdout
