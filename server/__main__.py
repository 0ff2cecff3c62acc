"""``python -m forewarn.server serve ...``: the sidecar without the rest of the ``forewarn`` CLI."""
from __future__ import annotations

import sys
from pathlib import Path

import typer

from ..errors import ForewarnError
from ..guard.cli.serve import register


def _builtin_model() -> Path:
    # An entry point, so it may reach the demo domain (an import contract names this exception).
    from ..domains.embodied.builtin import builtin_model_path

    return builtin_model_path()


app = typer.Typer(add_completion=False, no_args_is_help=True)
register(app, builtin=_builtin_model)


@app.callback()
def _main() -> None:
    """Forewarn sidecar."""


if __name__ == "__main__":
    try:
        app(standalone_mode=False)
    except ForewarnError as exc:
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(2)
