"""The ``forewarn`` command line (typer): the app, its commands assembled in the order ``--help``
lists them, and ``main()``, which maps errors to one line and exit status 2.

The core's commands live beside it: :mod:`.learn_cli`, :mod:`.check_cli`, :mod:`.states_cli`
(``states``, ``export``); the integrations' in their packages (``register(app)``).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from ...errors import ForewarnError
from . import check, learn, states
from ._model_text import members_of
from ._options import err, out

if TYPE_CHECKING:
    from ...domains.embodied.world import HouseholdWorld

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="Forewarn: a proactive runtime guard for LLM agents.")


def _print_version(value: bool) -> None:
    if value:
        from .._version import __version__

        sys.stdout.write(f"forewarn {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", help="Print the version and exit.", is_eager=True,
                                                callback=_print_version)] = False) -> None:
    """Forewarn: a proactive runtime guard for LLM agents."""


# the core's commands first: `forewarn --help` lists commands in the order they are added
learn.register(app)
check.register(app)
states.register(app)
_members = members_of  # the name this module had for it before the commands moved out (tests import it)


@app.command()
def demo(
    domain: Annotated[str, typer.Option(
        help="Built-in domain: embodied, driving, or mcp (the MCP proxy before a real git server).")] = "embodied",
    out_dir: Annotated[Path, typer.Option("--out", help="Where traces, specs and models go.")]
    = Path("forewarn-demo"),
    runs: Annotated[int, typer.Option(help="Logged runs per task to learn from.")] = 150,
    episodes: Annotated[int, typer.Option(help="Simulated episodes per task and configuration.")] = 40,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 7,
    heed: Annotated[float | None, typer.Option(help="Probability the agent heeds a reflection prompt.")]
    = None,
) -> None:
    """Run the whole pipeline on a built-in domain and print a Table-3-style comparison."""
    from ...domains.demo import run_demo

    run_demo(domain=domain, out_dir=out_dir, runs=runs, episodes=episodes, seed=seed, heed=heed, console=out)


def _builtin_model() -> Path:
    """What ``forewarn serve`` serves when no model is configured: the embodied demo's model."""
    from ...domains.embodied.builtin import builtin_model_path

    return builtin_model_path()


def _household_world() -> HouseholdWorld:
    """Where action-only logs are replayed (``--input-format actions``, ``--extractor household``)."""
    from ...domains.embodied.world import HouseholdWorld

    return HouseholdWorld()


def _register_plugins() -> None:
    """Commands that live with their subsystems (imported lazily: heavy back-ends load on use)."""
    from .._extras import missing, register_missing
    from ..ingest import use_world
    from .llmcheck import register as register_llmcheck
    from .replay import register as register_evaluation

    use_world(_household_world)
    register_evaluation(app)
    if missing("server"):  # the core install: `serve` is listed, and says which extra it needs
        register_missing(app, "serve", "server", "Serve the guard over HTTP (sessions, steps, approvals, models).")
    else:
        from .serve import register as register_server

        register_server(app, builtin=_builtin_model)
    register_llmcheck(app)
    if missing("mcp"):
        register_missing(app, "mcp", "mcp", "Guard any MCP server: a proxy that judges every tool call.")
    else:
        from .mcp import register as register_mcp

        register_mcp(app)


_register_plugins()


def _metavar(param: Any) -> str:
    descriptor = getattr(param, "type_descriptor", None)
    choices = getattr(descriptor, "choices", None) if getattr(descriptor, "is_choice", False) else None
    if choices:
        return "|".join(str(getattr(c, "value", c)) for c in choices)
    try:
        name = param.bare_type()
    except Exception:  # another typer version: fall back to a plain word
        name = "text"
    name = name.removeprefix("list[").removesuffix("]").lower()
    return {"float": "FLOAT", "int": "INTEGER", "path": "PATH"}.get(name, "TEXT")


def _tidy_help(command: Any) -> None:
    """Plain metavars (TRACES..., FLOAT, sound|exact) instead of typer's ``{traces}`` and ``<list[Path]>``."""
    for param in getattr(command, "params", []):  # typer vendors click: duck typing, not isinstance
        if param.param_type_name == "argument":
            shown = (param.metavar or param.name).upper().strip("[].") + ("..." if param.nargs != 1 else "")
            param.metavar = shown
            usage = shown if param.required else f"[{shown}]"
            # typer's own usage line says {traces} and its help column <list[Path]>
            param._usage_display_name = lambda usage=usage: usage
            param.display_type_rich = lambda ctx=None: None
        elif param.param_type_name == "option" and param.metavar is None and not getattr(param, "is_flag", False):
            param.metavar = _metavar(param)
    for sub in getattr(command, "commands", {}).values():
        _tidy_help(sub)


def _one_line(text: str) -> str:
    """Messages quoting a parser's multi-line report (YAML, Storm) still make one line."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def main() -> None:
    """Entry point: user errors print one clear line and exit 2, never a traceback."""
    from ._options import stdout_for_python_only

    command = typer.main.get_command(app)
    _tidy_help(command)
    # Storm prints its warnings on descriptor 1: keep them off stdout (JSON stays clean). Not
    # for `serve`, whose worker processes inherit the descriptors and log as they please.
    native_to_stderr = not (len(sys.argv) > 1 and sys.argv[1] == "serve")
    try:
        with stdout_for_python_only(native_to_stderr):
            command(standalone_mode=False, prog_name="forewarn")
    except ForewarnError as exc:
        # escape: messages quote user text (CEL such as `x in [a, b]`) that rich would read as markup;
        # soft_wrap: one line however long, so scripts can grep it
        err.print(f"[bold red]error:[/] {escape(_one_line(str(exc)))}", highlight=False, markup=True, soft_wrap=True)
        sys.exit(2)
    except (typer.Exit, SystemExit) as exc:
        code = getattr(exc, "exit_code", getattr(exc, "code", 0))
        sys.exit(code)
    except typer.Abort:
        sys.exit(130)
    except Exception as exc:  # click's usage errors; typer >= 0.2x vendors click, so no `import click`
        message, code = getattr(exc, "format_message", None), getattr(exc, "exit_code", None)
        if callable(message) and isinstance(code, int):
            # one line, like every other user error (click would print usage, a hint and the error)
            context = getattr(exc, "ctx", None)
            where = getattr(context, "command_path", None) or "forewarn"
            text = _one_line(str(message()).replace("Value error, ", ""))
            err.print(f"[bold red]error:[/] {escape(text)} (see '{escape(where)} --help')",
                      highlight=False, markup=True, soft_wrap=True)
            sys.exit(code)
        raise


if __name__ == "__main__":
    main()
