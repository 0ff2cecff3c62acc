"""Starting the sidecar: settings from options, API keys, uvicorn (one process or replicas).
The ``forewarn serve`` command that calls it is :mod:`forewarn.guard.cli.serve`."""

from __future__ import annotations

import re
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from ..errors import ModelFileError
from .settings import ApiKey, ConfigError, Role, ServerSettings, load_settings

__all__ = ["serve_from_options", "run_server", "serve_app", "parse_model_options", "uvicorn_config"]


def parse_model_options(values: list[str]) -> dict[str, Path]:
    """``--model`` values: ``PATH`` (named after the file) or ``NAME=PATH``."""
    models: dict[str, Path] = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep:
            path = value
            name = re.sub(r"[^A-Za-z0-9._-]", "-", Path(value).stem).lstrip("-._") or "model"
        if name in models:
            raise ConfigError(f"--model: the name {name!r} is given twice")
        models[name] = Path(path)
    return models


def _generated_keys() -> tuple[ApiKey, ...]:
    return tuple(ApiKey(key=SecretStr(f"fw-{role.value}-{secrets.token_urlsafe(24)}"), role=role,
                        name=f"generated-{role.value}") for role in Role)


def run_server(settings: ServerSettings, workers: int = 1, *, builtin: Callable[[], Path] | None = None) -> None:
    """Start (blocking) and serve until interrupted. Errors before binding raise ForewarnError.

    ``workers`` > 1: that many processes accept on one socket (a shared database only).
    ``builtin``: the model file to serve when none is configured (see :func:`server.state.start`)."""
    from .app import create_app, start

    if workers > 1:
        from .storage import is_postgres

        if not is_postgres(settings.db):
            raise ConfigError("--workers: more than one process needs a shared database "
                              "(FOREWARN_DB=postgresql://...); SQLite is owned by one process")
        _run_workers(settings, workers, builtin)
        return
    state = start(settings, builtin=builtin)  # a bad model or a locked database fails here, with its own message
    serve_app(create_app(settings, state=state), settings)


def _run_workers(settings: ServerSettings, workers: int, builtin: Callable[[], Path] | None) -> None:
    """Fork ``workers`` replicas on one listening socket (the kernel spreads the connections); each
    opens its own database connections after the fork. One that dies is started again."""
    import os
    import signal
    import socket

    from .app import create_app, start

    sock = socket.create_server((settings.host, settings.port), backlog=2048)
    sock.set_inheritable(True)

    def child() -> None:
        try:
            state = start(settings, builtin=builtin)
            serve_app(create_app(settings, state=state), settings, sockets=[sock])
        finally:
            os._exit(0)

    def spawn() -> int:
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            child()
        return pid

    stopping = False

    def stop(signum: int, _: object) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(children):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    children = {spawn() for _ in range(workers)}
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        children.discard(pid)
        if not stopping:
            sys.stderr.write(f"forewarn serve: worker {pid} exited ({status}); starting another\n")
            children.add(spawn())
    sock.close()


def serve_app(app: Any, settings: ServerSettings, sockets: list[Any] | None = None) -> None:
    """Run ``app`` on uvicorn as ``forewarn serve`` does."""
    import gc

    import uvicorn

    # Everything allocated so far (FastAPI, pydantic schemas, the models, numpy, stormpy) lives as
    # long as the process: out of the collector's sight, a full collection takes microseconds
    # instead of stalling every request in flight for a hundred milliseconds or more.
    gc.collect()
    gc.freeze()
    uvicorn.Server(uvicorn_config(app, settings)).run(sockets=sockets)


def uvicorn_config(app: Any, settings: ServerSettings, **overrides: Any) -> Any:
    """uvicorn's configuration for ``app``: the address, logging, and the connection limits
    (header deadline, connection cap, keep-alive) of ``settings.limits``."""
    import uvicorn

    from .connections import guarded_protocol

    limits = settings.limits
    values: dict[str, Any] = dict(
        host=settings.host, port=settings.port, log_level=settings.log_level, access_log=settings.access_log,
        lifespan="on", server_header=False, timeout_graceful_shutdown=5,
        http=guarded_protocol(header_timeout=limits.header_timeout, max_connections=limits.max_connections,
                              max_per_client=limits.max_connections_per_client,
                              evict_stalled_after=limits.evict_stalled_after),
        timeout_keep_alive=limits.keep_alive_seconds, h11_max_incomplete_event_size=64 * 1024)
    values.update(overrides)
    return uvicorn.Config(app, **values)


def serve_from_options(options: dict[str, Any], builtin: Callable[[], Path] | None) -> None:
    """``forewarn serve`` with its options as a dict; ``builtin`` gives the model file served when none is
    configured (the entry points pass the embodied demo's: the server builds on no domain)."""
    from ..guard.trust import RETIRED_ALLOW_LIST

    if options.get("allow_python"):
        raise ConfigError(RETIRED_ALLOW_LIST)
    model, trusted_key, model_dir = options["model"], options["trusted_key"], options["model_dir"]
    overrides = {
        **{key: options[key] for key in ("host", "port", "db", "default_model", "synchronous", "log_level")},
        "models": parse_model_options(model) if model else None,
        "insecure_no_auth": True if options["insecure_no_auth"] else None,
        "access_log": True if options["access_log"] else None,
        "trusted_keys": tuple(trusted_key) if trusted_key else None,
        "model_dirs": tuple(model_dir) if model_dir else None,
    }
    settings = load_settings(options["config"], **overrides)
    for name, path in settings.models.items():  # before keys are printed: a typo is one line, nothing else
        if not path.is_file():
            raise ModelFileError(f"--model {name}={path}: {'is a directory' if path.is_dir() else 'no such file'}")
    if not settings.api_keys and not settings.insecure_no_auth:
        # A safe default that still lets `forewarn serve` work out of the box: fresh keys for this run only.
        keys = _generated_keys()
        settings = settings.model_copy(update={"api_keys": keys})
        lines = [f"  {k.role.value:<9} {k.key.get_secret_value()}" for k in keys]
        sys.stderr.write("forewarn serve: no API keys configured (FOREWARN_API_KEYS or api_keys in --config); "
                         "generated these for this run:\n" + "\n".join(lines) + "\n")
        sys.stderr.flush()
    elif settings.insecure_no_auth:
        sys.stderr.write("forewarn serve: WARNING: --insecure-no-auth: anyone who can reach "
                         f"{settings.host}:{settings.port} acts as admin\n")
    run_server(settings, options["workers"], builtin=builtin)
