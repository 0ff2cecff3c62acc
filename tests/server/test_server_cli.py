"""``forewarn serve``: options, the generated keys of a bare start, errors before binding."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import typer
from typer.testing import CliRunner

from _sidecar import free_port, wait_ready
from forewarn.errors import ModelFileError
from forewarn.guard.cli.serve import register
from forewarn.server.run import parse_model_options
from forewarn.server.settings import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_model_options() -> None:
    assert parse_model_options(["a/demo.json", "prod=b/m.json"]) == {"demo": Path("a/demo.json"),
                                                                     "prod": Path("b/m.json")}
    with pytest.raises(ConfigError, match="twice"):
        parse_model_options(["x/m.json", "m=y.json"])


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)

    @app.callback()
    def main() -> None:
        """test"""

    return app


def test_register_adds_serve() -> None:
    result = CliRunner().invoke(_app(), ["serve", "--help"])
    assert result.exit_code == 0 and "--insecure-no-auth" in result.output and "--model" in result.output


def test_bad_model_fails_before_binding(tmp_path: Path) -> None:
    result = CliRunner().invoke(_app(), ["serve", "--model", str(tmp_path / "missing.json"), "--db",
                                         str(tmp_path / "x.db"), "--port", str(free_port())],
                                env={"FOREWARN_API_KEYS": "k:admin"})
    assert isinstance(result.exception, ModelFileError) and "missing.json" in str(result.exception)
    assert not (tmp_path / "x.db").exists()
    # without configured keys, fresh ones would be printed: the missing model is reported first, alone
    import contextlib
    import io

    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        result = CliRunner().invoke(_app(), ["serve", "--model", str(tmp_path / "nope.json"), "--db",
                                             str(tmp_path / "x.db"), "--port", str(free_port())],
                                    env={"FOREWARN_API_KEYS": None})
    assert isinstance(result.exception, ModelFileError) and "nope.json: no such file" in str(result.exception)
    assert "generated these" not in stderr.getvalue() + result.output
    result = CliRunner().invoke(_app(), ["serve", "--host", "0.0.0.0", "--insecure-no-auth"])
    assert isinstance(result.exception, ConfigError) and "loopback" in str(result.exception)


def test_serve_needs_a_model_unless_its_entry_point_gives_the_demo_one(tmp_path: Path) -> None:
    """The server builds on no domain: the built-in demo model comes from the entry point."""
    result = CliRunner().invoke(_app(), ["serve", "--db", str(tmp_path / "x.db"), "--port", str(free_port())],
                                env={"FOREWARN_API_KEYS": "k:admin"})
    assert isinstance(result.exception, ConfigError) and "no model to serve" in str(result.exception)
    assert not (tmp_path / "x.db").exists()


def test_bare_serve_generates_keys_and_stops_cleanly(tmp_path: Path, builtin_path: Path) -> None:
    """The real command in its own interpreter: no keys configured gives fresh ones, printed once."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FOREWARN_")}
    env["FOREWARN_CACHE"] = str(builtin_path.parent.parent)  # the built-in model, already learned
    env["PYTHONPATH"] = str(ROOT)
    process = subprocess.Popen([sys.executable, "-m", "forewarn.server", "serve", "--port", str(port), "--log-level",
                                "warning"], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_ready(f"http://127.0.0.1:{port}", 60, process=_Alive(process))
        assert process.stderr is not None
        lines = [process.stderr.readline() for _ in range(4)]
        keys = dict(re.findall(r"^\s+(agent|approver|admin)\s+(\S+)$", "".join(lines), re.M))
        assert set(keys) == {"agent", "approver", "admin"}, lines
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as http:
            assert http.get("/v1/models").status_code == 401
            models = http.get("/v1/models", headers={"Authorization": f"Bearer {keys['admin']}"}).json()
            assert models["default"] == "builtin"
        assert (tmp_path / "forewarn.db").exists()  # the default database, in the working directory
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(20)
        if process.stderr is not None:
            process.stderr.close()
    # uvicorn shuts down gracefully, then re-raises the signal so the exit status tells why it stopped
    assert code in (0, -signal.SIGTERM)
    assert not (tmp_path / "forewarn.db-wal").exists()  # the database was closed cleanly (WAL checkpointed)


class _Alive:
    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process

    def is_alive(self) -> bool:
        return self.process.poll() is None

    @property
    def exitcode(self) -> int | None:
        return self.process.poll()
