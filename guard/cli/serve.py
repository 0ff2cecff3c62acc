"""``forewarn serve``: the HTTP sidecar (the server extra). ``register(app)`` adds it to a typer app."""
from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer


def serve(
    model: Annotated[list[str] | None, typer.Option(
        "--model", "-m", help="A model file, or NAME=FILE; repeatable. Default: the built-in demo model.")] = None,
    host: Annotated[str | None, typer.Option(help="Address to bind (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8321).")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Server config file (YAML).")] = None,
    db: Annotated[str | None, typer.Option(
        help="SQLite database file (default ./forewarn.db), or a postgresql:// URL that replicas share (FOREWARN_DB).")]
    = None,
    default_model: Annotated[str | None, typer.Option(help="Model for sessions that name none.")] = None,
    synchronous: Annotated[str | None, typer.Option(
        help="normal: survives a killed process; full: also a power loss (fsync per group commit).")] = None,
    insecure_no_auth: Annotated[bool, typer.Option(
        "--insecure-no-auth", help="Serve without API keys (loopback addresses only).")] = False,
    log_level: Annotated[str | None, typer.Option(help="critical, error, warning, info, debug.")] = None,
    access_log: Annotated[bool, typer.Option("--access-log", help="Log every request.")] = False,
    allow_python: Annotated[list[str] | None, typer.Option(
        "--allow-python", hidden=True, help="Retired: register predicates instead (docs/spec.md).")] = None,
    trusted_key: Annotated[list[Path] | None, typer.Option(
        "--trusted-key", help="Serve only models signed by this Ed25519 public key (PEM); repeatable "
                              "(FOREWARN_TRUSTED_KEYS).")] = None,
    model_dir: Annotated[list[Path] | None, typer.Option(
        "--model-dir", help="A folder POST /v1/models may load model files from; repeatable "
                            "(FOREWARN_MODEL_DIRS). Default: none (upload models as documents).")] = None,
    workers: Annotated[int, typer.Option(
        min=1, help="Processes serving the port, each a replica (needs FOREWARN_DB=postgresql://...).")] = 1,
) -> None:
    """Serve the guard over HTTP (sessions, steps, approvals, models, metrics); needs the server extra."""
    from ...server.run import serve_from_options

    serve_from_options(locals(), None)



def register(app: typer.Typer, *, builtin: Callable[[], Path] | None = None) -> None:
    """Add ``serve`` to a typer app (``forewarn.guard.cli`` does this for ``forewarn``).

    ``builtin`` gives the model file ``serve`` serves when none is configured: the entry
    points pass the embodied demo's (docs/architecture.md: the server builds on no domain).
    Without it, ``serve`` needs ``--model``."""

    @functools.wraps(serve)
    def command(**options: Any) -> None:
        from .._extras import require

        require("server", "forewarn serve")  # `serve --help` works without the extra; serving needs it
        from ...server.run import serve_from_options

        serve_from_options(options, builtin)

    app.command("serve")(command)
