"""Running real servers for the tests: uvicorn in a thread, or in a process of its own.

Threads are for flows that need a real socket but not a process to kill. Processes
are forked from a multiprocessing *forkserver* that has imported the server once, so a
restart costs a fork and a model load instead of a second and a half of imports; the
process is real all the same, and ``kill -9`` kills it.
"""
from __future__ import annotations

import multiprocessing
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import uvicorn

from _ports import free_port as free_port
from forewarn.server.app import create_app
from forewarn.server.run import uvicorn_config
from forewarn.server.settings import ServerSettings

KEYS = {"agent": "test-agent-key-0123456789", "approver": "test-approver-key-0123456789",
        "admin": "test-admin-key-0123456789"}
API_KEYS = ",".join(f"{key}:{role}:{role}-bob" for role, key in KEYS.items())

# An embodied state for the built-in model (egg in microwave, ...), by its four facts.
def egg_state(in_microwave: bool = False, toggled: bool = False, closed: bool = False, holding: bool = False,
              **extra: Any) -> dict[str, Any]:
    return {"objects": {"Egg": {"parentReceptacles": ["Microwave"] if in_microwave else ["Fridge"],
                                "isPickedUp": holding},
                        "Microwave": {"isToggled": toggled, "isOpen": not closed}}, **extra}


def settings(db: Path | str, models: dict[str, Path], **extra: Any) -> ServerSettings:
    # the tests' model files live under the temporary folder: the one folder path loads may read
    values: dict[str, Any] = {"db": db, "models": models, "api_keys": API_KEYS, "log_level": "warning",
                              "model_dirs": (Path(tempfile.gettempdir()),)}
    values.update(extra)
    return ServerSettings(**values)


class ServerThread:
    """uvicorn serving ``create_app(settings)`` on a free loopback port, in a thread."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.app = create_app(settings)
        config = uvicorn_config(self.app, settings, log_level="warning", timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *_: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)
        self.sock.close()


_CONTEXT: Any = None


def _forkserver() -> Any:
    global _CONTEXT  # noqa: PLW0603 - one forkserver per test process
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context("forkserver")
        # everything a server imports, lazily ones included, so that a forked server starts in a blink
        _CONTEXT.set_forkserver_preload(["forewarn.server.run", "forewarn.server.app", "forewarn.monitors",
                                         "forewarn.domains.embodied.builtin", "uvicorn",
                                         "uvicorn.lifespan.on", "uvicorn.loops.auto", "uvicorn.loops.asyncio",
                                         "uvicorn.protocols.http.auto", "uvicorn.protocols.http.h11_impl",
                                         "uvicorn.protocols.websockets.auto", "pydantic.v1"])
    return _CONTEXT


class ServerProcess:
    """A server in a process of its own (``forewarn.server.run.run_server``), on a fresh port."""

    def __init__(self, settings: ServerSettings, port: int | None = None) -> None:
        from forewarn.server.run import run_server

        self.port = port or free_port()
        self.settings = settings.model_copy(update={"port": self.port})
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = _forkserver().Process(target=run_server, args=(self.settings,), daemon=True)

    def start(self, timeout: float = 30.0) -> ServerProcess:
        self.process.start()
        wait_ready(self.url, timeout, self.process)
        return self

    @property
    def pid(self) -> int:
        return int(self.process.pid)

    def kill(self) -> None:
        self.process.kill()  # SIGKILL
        self.process.join(10)

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.terminate()  # SIGTERM: uvicorn shuts down gracefully
            self.process.join(15)
        if self.process.is_alive():
            self.kill()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *_: Any) -> None:
        self.stop()


def wait_ready(url: str, timeout: float, process: Any = None) -> None:
    """Poll /readyz with a plain socket (an httpx client per poll costs more than a server start)."""
    host, port = url.removeprefix("http://").split(":")
    request = f"GET /readyz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and not process.is_alive():
            raise RuntimeError(f"the server process exited with code {process.exitcode}")
        try:
            with socket.create_connection((host, int(port)), timeout=1.0) as sock:
                sock.sendall(request)
                if sock.recv(64).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            pass
        time.sleep(0.01)
    raise RuntimeError(f"{url} was not ready within {timeout} s")


def auth(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[role]}"}


def refused_uploads(http: Any, name: str, document: dict[str, Any], path: Path) -> list[str]:
    """Upload ``document`` as ``name`` in the request, then by its file ``path``: each must be a one-line
    ``422 invalid_model`` naming its field (``body.document``, ``body.path``); their messages."""
    path.write_bytes(orjson.dumps(document))
    messages = []
    for body, field in (({"name": name, "document": document}, "body.document"),
                        ({"name": name, "path": str(path)}, "body.path")):
        response = http.post("/v1/models", json=body, headers=auth("admin"))
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["code"] == "invalid_model" and error["field"] == field and "\n" not in error["message"]
        messages.append(str(error["message"]))
    return messages
