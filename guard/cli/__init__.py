"""The ``forewarn`` command line (typer): the app, its commands assembled in the order ``--help``
lists them, and ``main()``, which maps errors to one line and exit status 2.

One module per command beside it, each with ``register(app)``: :mod:`.learn`, :mod:`.check`,
:mod:`.states` (``states``, ``export``), :mod:`.replay`, :mod:`.evaluate`, :mod:`.ingest`, :mod:`.tune`,
:mod:`.llmcheck`, :mod:`.serve`; what several share is in :mod:`._options`, :mod:`._replay_options`,
:mod:`._replay_output` and :mod:`._model_text`.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

INTERRUPTED = 130  # the shell's status for a command ended by Ctrl-C (128 + SIGINT)


def _interrupted() -> None:
    sys.stderr.write("error: interrupted; an output being written was discarded\n")
    sys.stderr.flush()


def _by_ctrl_c(exc: BaseException) -> bool:
    """Whether ``exc`` is Ctrl-C, or what Ctrl-C became: a compiled module (stormpy's pybind11 parts,
    numpy) whose initialisation it interrupts fails with ``ImportError: initialization failed``,
    caused by the KeyboardInterrupt."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


try:  # Ctrl-C while the CLI loads (a second or more on a busy machine) ends as it does later: one line, 130
    import typer
    from rich.markup import escape

    from ...errors import ForewarnError
    from . import check, learn, states
    from ._model_text import members_of
    from ._options import err, out
except BaseException as exc:
    if not _by_ctrl_c(exc):
        raise
    _interrupted()
    raise SystemExit(INTERRUPTED) from None

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
    import os

    if os.environ.get("FOREWARN_PYTHON_PREDICATES"):  # the 0.1 allow-list: refused, not silently ignored
        from ...errors import ConfigError
        from ..trust import RETIRED_ALLOW_LIST

        raise ConfigError(f"FOREWARN_PYTHON_PREDICATES is set: {RETIRED_ALLOW_LIST}")


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
    runs: Annotated[int | None, typer.Option(help="Logged runs per task to learn from (150; 6 with --agent llm).")]
    = None,
    episodes: Annotated[int | None, typer.Option(
        help="Episodes per task and configuration (40; 5 with --agent llm).")] = None,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 7,
    heed: Annotated[float | None, typer.Option(help="Probability the agent heeds a reflection prompt.")]
    = None,
    agent: Annotated[str, typer.Option(
        help="The embodied agent: 'simulated', or 'llm' (a real local model; the llm extra).")] = "simulated",
    model: Annotated[str, typer.Option(
        help="With --agent llm: 'gguf:package' (the llm extra's model), 'gguf:FILE.gguf', 'openai:URL#MODEL' (an "
             "OpenAI-compatible endpoint) or 'openai' (OPENAI_BASE_URL, OPENAI_MODEL).")] = "gguf:package",
    tasks: Annotated[int, typer.Option(help="With --agent llm: how many household tasks.")] = 3,
    temperature: Annotated[float, typer.Option(help="With --agent llm: of the model's choice of action.")] = 0.5,
    mkdir: Annotated[bool, typer.Option("--mkdir", help="Create the missing folders above --out.")] = False,
) -> None:
    """Run the whole pipeline on a built-in domain and print a Table-3-style comparison."""
    from ...errors import ConfigError
    from ..output_files import check_output

    if not out_dir.is_dir():  # --out itself is made; the folder it goes in must exist (or --mkdir)
        check_output(out_dir, mkdir=mkdir, option="--out")
    if agent == "llm":
        from ...domains.llm_demo import run_llm_demo
        from .._extras import require

        if domain != "embodied":
            raise ConfigError(f"--agent llm runs on the embodied domain, not {domain!r}")
        if not model.startswith(("gguf:", "openai:")) and model != "openai":
            raise ConfigError(f"--model {model!r}: expected gguf:package, gguf:FILE.gguf, openai:URL#MODEL or openai")
        if model.startswith("gguf:"):
            require("llm", "forewarn demo --agent llm")
        else:
            require("llmcheck", "forewarn demo --agent llm --model openai", ("httpx",))
        out_dir.mkdir(exist_ok=True)
        run_llm_demo(out_dir=out_dir, model=model, tasks=tasks, runs=6 if runs is None else runs,
                     episodes=5 if episodes is None else episodes, seed=seed, temperature=temperature,
                     console=out)
        return
    if agent != "simulated":
        raise ConfigError(f"--agent {agent!r}: expected simulated or llm")
    from ...domains.demo import run_demo

    run_demo(domain=domain, out_dir=out_dir, runs=150 if runs is None else runs,
             episodes=40 if episodes is None else episodes, seed=seed, heed=heed, console=out)


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
    from . import discover, evaluate, ingest, init, replay, tune
    from .llmcheck import register as register_llmcheck

    use_world(_household_world)
    for command in (replay, evaluate, ingest, tune, discover, init):
        command.register(app)
    from .serve import register as register_server  # imports no server code: --help works on the core install

    register_server(app, builtin=_builtin_model)
    register_llmcheck(app)
    if missing("mcp"):
        register_missing(app, "mcp", "mcp", "Guard any MCP server: a proxy that judges every tool call.")
    else:
        from .mcp import register as register_mcp

        register_mcp(app)


try:  # these commands' modules load here, as the core's did above: Ctrl-C ends the same way
    _register_plugins()
except BaseException as exc:
    if not _by_ctrl_c(exc):
        raise
    _interrupted()
    raise SystemExit(INTERRUPTED) from None


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


# What `forewarn -h` lists (whole sentences, never cut) and what `forewarn COMMAND -h` ends with: one
# example and the section of the docs that explains the command.
_GUIDE: dict[str, tuple[str, str, str]] = {
    "learn": ("Learn a DTMC from traces, check it with Storm, write the model.",
              "forewarn learn runs.jsonl --spec spec.yaml -o model.json", "docs/guide.md"),
    "check": ("Show a model's risk per state, or check a PCTL property.",
              "forewarn check model.json --property 'P=? [F<=5 \"unsafe\"]'", "docs/guide.md"),
    "states": ("List states: visits, risk, action, likeliest path to unsafe.",
               "forewarn states model.json", "docs/guide.md"),
    "export": ("Export the learned chain as PRISM or DRN.",
               "forewarn export model.json --format prism -o model.pm", "docs/guide.md"),
    "demo": ("Run the whole pipeline on a built-in domain.",
             "forewarn demo --domain embodied", "docs/demo.md"),
    "replay": ("Replay logged runs against a model: warnings per threshold.",
               "forewarn replay runs.jsonl --model model.json", "docs/replay.md#forewarn-replay"),
    "evaluate": ("Cross-validate learning on logged runs.",
                 "forewarn evaluate runs.jsonl --spec spec.yaml --group-by meta.task",
                 "docs/replay.md#forewarn-evaluate"),
    "ingest": ("Convert agent logs into Forewarn's JSONL traces.",
               "forewarn ingest agent-logs.jsonl -o runs.jsonl", "docs/ingest.md"),
    "tune": ("Choose thresholds from cross-validation to meet targets.",
             "forewarn tune runs.jsonl --spec spec.yaml --target false-alarms=0.05 -o tuned.yaml",
             "docs/replay.md#forewarn-tune"),
    "discover": ("Find predicates in the runs that improve held-out prediction.",
                 "forewarn discover runs.jsonl --spec spec.yaml -o discovered.yaml",
                 "docs/replay.md#forewarn-discover"),
    "init": ("Write a starting spec from runs and an unsafe condition.",
             "forewarn init runs.jsonl --unsafe 'state.broken' -o spec.yaml",
             "docs/discovery.md#forewarn-init-a-spec-from-runs-and-an-unsafe-condition"),
    "serve": ("Serve the guard over HTTP (the sidecar).",
              "forewarn serve --model model.json", "docs/server.md"),
    "llmcheck": ("Check what an LLM is likely to write, with Storm.",
                 "forewarn llmcheck -m ngram:corpus.txt --prompt 'The player' --quantify gender_bias "
                 "--property 'P=? [F \"gender_bias>0\"]'",
                 "docs/llmcheck.md"),
    "mcp": ("Guard any MCP server: a proxy that judges every tool call.",
            "forewarn mcp --model model.json -- mcp-server-git --repository .", "docs/mcp.md"),
}


def _guide(command: Any) -> None:
    """Whole-sentence summaries in the listing, and an example and a docs link under each command's help."""
    for name, sub in getattr(command, "commands", {}).items():
        guide = _GUIDE.get(name)
        if guide is None:
            continue
        short, example, docs = guide
        sub.short_help = short
        sub.epilog = f"Example:\n\n  {example}\n\nDocs: {docs}"


def _one_line(text: str) -> str:
    """Messages quoting a parser's multi-line report (YAML, Storm) still make one line."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def main() -> None:
    """Entry point: user errors print one clear line and exit 2, never a traceback."""
    from ._options import stdout_for_python_only

    # Storm prints its warnings on descriptor 1: keep them off stdout (JSON stays clean). Not
    # for `serve`, whose worker processes inherit the descriptors and log as they please.
    native_to_stderr = not (len(sys.argv) > 1 and sys.argv[1] == "serve")
    try:
        command = typer.main.get_command(app)
        _tidy_help(command)
        _guide(command)
        with stdout_for_python_only(native_to_stderr):
            # typer turns Ctrl-C into Exit(130) and, outside standalone mode, returns an Exit's code
            # instead of exiting with it: the code must reach the shell (`learn ... && deploy`)
            code = command(standalone_mode=False, prog_name="forewarn")
        if code == INTERRUPTED:
            _interrupted()
        if isinstance(code, int) and code:
            sys.exit(code)
    except KeyboardInterrupt:  # outside typer's own handling (its import, our teardown)
        _interrupted()
        sys.exit(INTERRUPTED)
    except ForewarnError as exc:
        if _by_ctrl_c(exc):  # a command's lazy import, interrupted, read as a missing extra
            _interrupted()
            sys.exit(INTERRUPTED)
        # escape: messages quote user text (CEL such as `x in [a, b]`) that rich would read as markup;
        # soft_wrap: one line however long, so scripts can grep it
        err.print(f"[bold red]error:[/] {escape(_one_line(str(exc)))}", highlight=False, markup=True, soft_wrap=True)
        sys.exit(2)
    except (typer.Exit, SystemExit) as exc:
        code = getattr(exc, "exit_code", getattr(exc, "code", 0))
        sys.exit(code)
    except typer.Abort:
        sys.exit(INTERRUPTED)
    except Exception as exc:  # click's usage errors; typer >= 0.2x vendors click, so no `import click`
        message, code = getattr(exc, "format_message", None), getattr(exc, "exit_code", None)
        if callable(message) and isinstance(code, int) and type(exc).__name__ == "NoArgsIsHelpError":
            # a bare `forewarn` (or a command group): click's message is the whole help; shown as help,
            # on stderr with status 2, as click itself would, not squashed onto one error line
            sys.stderr.write(str(message()).rstrip("\n") + "\n")
            sys.exit(code)
        if callable(message) and isinstance(code, int):
            # one line, like every other user error (click would print usage, a hint and the error)
            context = getattr(exc, "ctx", None)
            where = getattr(context, "command_path", None) or "forewarn"
            text = _one_line(str(message()).replace("Value error, ", ""))
            err.print(f"[bold red]error:[/] {escape(text)} (see '{escape(where)} --help')",
                      highlight=False, markup=True, soft_wrap=True)
            sys.exit(code)
        if _by_ctrl_c(exc):  # a command's lazy import of a compiled module, interrupted (see _by_ctrl_c)
            _interrupted()
            sys.exit(INTERRUPTED)
        raise


if __name__ == "__main__":
    main()
