"""The ``forewarn`` command line (typer). Thin: parsing, printing, exit codes."""
from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import numpy as np
import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from guard._cli import (
    Format,
    check_alpha,
    check_period,
    check_precision,
    check_probability,
    err,
    out,
    print_json,
    print_summary,
    warn,
)
from guard.errors import ForewarnError
from guard.ingest.summary import IngestSummary
from guard.model import GuardModel
from guard.storm import (
    Method,
    build_sparse_dtmc,
    check_dtmc,
    check_prism_file,
    ctl_verdicts,
    export_drn,
    labels_of,
    prism_text,
)

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="Forewarn: a proactive runtime guard for LLM agents.")


class ExportFormat(str, Enum):
    prism = "prism"
    drn = "drn"


class OnError(str, Enum):
    stop = "stop"
    skip = "skip"


def _print_version(value: bool) -> None:
    if value:
        from guard._version import __version__

        sys.stdout.write(f"forewarn {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", help="Print the version and exit.", is_eager=True,
                                                callback=_print_version)] = False) -> None:
    """Forewarn: a proactive runtime guard for LLM agents."""


def _fmt(value: float | None, digits: int = 4) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


@app.command()
def learn(
    traces: Annotated[list[Path], typer.Argument(help="JSONL trace files (one run a line).")],
    spec: Annotated[Path, typer.Option("--spec", "-s", help="YAML spec.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Model file to write.")],
    alpha: Annotated[Optional[float], typer.Option(help="Laplace smoothing α (default: the spec's).")] = None,
    method: Annotated[Method, typer.Option(help="Storm method: sound (certified bounds), topological, exact.")]
    = Method.SOUND,
    precision: Annotated[float, typer.Option(help="Solver precision (sound/topological).")] = 1e-6,
    epsilon: Annotated[Optional[float], typer.Option(help="PAC ε (default: the spec's).")] = None,
    delta: Annotated[Optional[float], typer.Option(help="PAC δ (default: the spec's).")] = None,
    period: Annotated[Optional[float], typer.Option(help="Resample runs to one step every PERIOD seconds "
                                                         "(zero-order hold; needs 't' on every step).")] = None,
    format: Annotated[Format, typer.Option("--format", help="Summary format.")] = Format.table,
    on_error: Annotated[OnError, typer.Option(
        "--on-error", help="A malformed run stops learning, or is skipped and counted in the summary.")]
    = OnError.stop,
) -> None:
    """Learn a DTMC from traces, check it with Storm for every state, and write the model file."""
    from guard.pipeline import learn_model
    from guard.spec import load_spec

    check_alpha(alpha)
    check_precision(precision)
    check_probability(epsilon, "--epsilon")
    check_probability(delta, "--delta")
    check_period(period)
    parsed = load_spec(spec)
    read = IngestSummary()
    with Progress(TextColumn("learning"), BarColumn(), TextColumn("{task.completed} runs"), TimeElapsedColumn(),
                  console=err, transient=True, disable=not err.is_terminal) as progress:
        task = progress.add_task("learn", total=None)
        model = learn_model(traces, parsed, alpha=alpha, method=method, precision=precision, epsilon=epsilon,
                            delta=delta, period=period, on_run=lambda n: progress.update(task, completed=n),
                            on_error=on_error.value, summary=read)
    try:
        model.save(output)
    except OSError as exc:  # e.g. -o names a folder, or a path under a file
        raise ForewarnError(f"{output}: cannot write the model file: {exc.strerror}") from exc
    summary = _summary(model, output)
    summary["read"] = read.to_dict()
    print_summary(read, "learned from")
    for message in _degenerate(model):
        warn(message)
    if format is Format.json:
        print_json(summary)
        return
    table = Table(title=f"forewarn learn → {output}", show_header=False)
    for key, value in summary.items():
        if key not in ("pac_worst", "read"):
            table.add_row(key, str(value))
    out.print(table)
    worst = summary["pac_worst"]
    if worst:
        out.print(f"PAC (ε={model.pac.epsilon}, δ={model.pac.delta}): "
                  f"{model.pac.satisfied_count}/{len(model.pac.states)} states have enough visits; worst "
                  f"state {worst['state']} ({worst['predicates']}) has {worst['visits']} of "
                  f"{worst['required']} required.")


def _degenerate(model: GuardModel) -> list[str]:
    """Warnings for a spec or data that make the model say nothing useful."""
    from guard.predicates import PredicateSet

    found = []
    try:
        predicates = PredicateSet(model.spec)
    except ForewarnError:
        return found
    if predicates.width <= 16 and all(predicates.is_unsafe(bits) for bits in range(1 << predicates.width)):
        found.append(f"'unsafe' ({model.spec.unsafe}) holds whatever the predicates are: every state is unsafe, "
                     "every risk is 1 and every decision the same")
    elif model.provenance.get("unsafe_runs") == 0:
        found.append("no run reached an unsafe state: every risk in this model comes from smoothing alone")
    elif model.provenance.get("unsafe_runs") == model.provenance.get("runs"):
        found.append("every run reached an unsafe state: the model cannot tell a risky start from a safe one")
    return found


def _summary(model: GuardModel, output: Path) -> dict[str, Any]:
    d, o, pac = model.dtmc, model.outcome, model.pac  # o: the first property
    worst = pac.worst
    initial_runs = sum(d.initial.values()) or 1
    initial_risk = sum(o.values[i] * n for i, n in d.initial.items()) / initial_runs
    return {
        "model": str(output),
        "spec": model.spec.name,
        "runs": model.provenance["runs"],
        "steps": model.provenance["steps"],
        "unsafe_runs": model.provenance["unsafe_runs"],
        "states": model.provenance.get("chain_states", d.size),
        "product_states": d.size,
        "monitors": ", ".join(d.monitors) or "none",
        "transitions": int(d.matrix.nnz),
        "unsafe_states": int(d.unsafe.sum()),
        "invalid_observed_transitions": d.invalid_observed,
        "properties": "; ".join(f"{p.name}: {p.outcome.formula}" for p in model.properties),
        "method": o.method.value,
        "initial_risk": round(float(initial_risk), 6),
        "learn_seconds": model.provenance["learn_seconds"],
        "check_seconds": model.provenance.get("check_seconds", round(o.seconds, 6)),
        "pac_satisfied": pac.satisfied,
        "pac_amplification": pac.amplification,
        "pac_worst": None if worst is None else {
            "state": worst.state, "visits": worst.visits, "required": worst.required,
            "predicates": _pac_words(model, worst.state)},
    }


def _pac_words(model: GuardModel, index: int) -> str:
    """A PAC entry's chain state in words (PAC is about the chain, before any product)."""
    if model.pac_valuations is None:
        return _state_words(model, index)
    held = [n for n, v in zip(model.dtmc.predicates, model.pac_valuations[index]) if v]
    return ", ".join(held) if held else "no predicate holds"


def _state_words(model: GuardModel, index: int) -> str:
    bits = model.dtmc.states[index]
    if bits < 0:
        return "end"
    held = [n for b, n in enumerate(model.dtmc.predicates) if bits >> b & 1]
    return ", ".join(held) if held else "no predicate holds"


@app.command()
def check(
    model: Annotated[Path, typer.Argument(help="A Forewarn model file, or a PRISM DTMC (.pm/.prism).")],
    property: Annotated[Optional[str], typer.Option("--property", "-p", help="PCTL property, e.g. 'P=? [F<=5 \"unsafe\"]'.")]
    = None,
    const: Annotated[Optional[str], typer.Option("--const", help="PRISM constants, e.g. N=16,K=2.")] = None,
    method: Annotated[Method, typer.Option(help="Storm method.")] = Method.SOUND,
    precision: Annotated[float, typer.Option(help="Solver precision.")] = 1e-6,
    format: Annotated[Format, typer.Option("--format")] = Format.table,
) -> None:
    """Show the cached per-state values of a model, or check another property with Storm."""
    check_precision(precision)
    if model.suffix in {".pm", ".prism"}:
        if property is None:
            raise ForewarnError("checking a PRISM file needs --property, e.g. --property 'P=? [F \"goal\"]'")
        result = check_prism_file(model, property, constants=const, method=method, precision=precision)
        _print_prism(result, format)
        return
    if const is not None:
        raise ForewarnError("--const applies to PRISM files only")
    loaded = GuardModel.load(model)
    dtmc = loaded.dtmc
    if property is not None:
        # check_dtmc builds a rational model for --method exact (a float model is not exact)
        outcomes = [("query", check_dtmc(dtmc, property, method=method, precision=precision))]
    else:
        outcomes = [(p.name, p.outcome) for p in loaded.properties]
    verdicts = ctl_verdicts(build_sparse_dtmc(dtmc.matrix, labels_of(dtmc)))
    monitor_rows = dtmc.monitor_states.tolist() if dtmc.monitor_states is not None else None
    monitors: dict[str, Any] = {}
    if monitor_rows is not None:
        from monitors import build_monitors

        monitors = {m.name: m for m in build_monitors(loaded.spec)}
    first = outcomes[0][1]
    rows = []
    for i, bits in enumerate(dtmc.states):
        row: dict[str, Any] = {
            "predicates": {} if bits < 0 else {n: bool(bits >> b & 1) for b, n in enumerate(dtmc.predicates)},
            "monitors": {} if monitor_rows is None or bits < 0 else {
                name: monitors[name].describe(q) for name, q in zip(dtmc.monitors, monitor_rows[i])},
            "kind": "end" if bits < 0 else "state",
            "unsafe": bool(dtmc.unsafe[i]),
            "value": float(first.values[i]),
            "lower": None if first.lower is None else float(first.lower[i]),
            "upper": None if first.upper is None else float(first.upper[i]),
            "ctl": {name: bool(v[i]) for name, v in verdicts.items()},
        }
        if len(outcomes) > 1:
            row["properties"] = {name: {"value": float(o.values[i]),
                                        "lower": None if o.lower is None else float(o.lower[i]),
                                        "upper": None if o.upper is None else float(o.upper[i])}
                                 for name, o in outcomes}
        rows.append(row)
    if format is Format.json:
        print_json({"property": first.formula, "method": first.method.value,
                     "properties": [{"name": name, "formula": o.formula} for name, o in outcomes],
                     "states": rows})
        return
    table = Table(title="  ".join(f"{name}: {o.formula}" for name, o in outcomes) + f"  ({first.method.value})")
    columns = ["#", "state"] + (["monitors"] if monitor_rows is not None else []) + ["unsafe"] \
        + [name for name, _ in outcomes] + (["lower", "upper"] if len(outcomes) == 1 else []) \
        + ["EF unsafe", "AG !unsafe"]
    for column in columns:
        table.add_column(column, justify="left" if column in {"state", "monitors", "unsafe"} else "right")
    for i, row in enumerate(rows):
        cells = [str(i), "end" if row["kind"] == "end" else _state_words(loaded, i)]
        if monitor_rows is not None:
            cells.append(", ".join(f"{k} {v}" for k, v in row["monitors"].items()))
        cells.append("yes" if row["unsafe"] else "")
        cells += [_fmt(float(o.values[i]), 6) for _, o in outcomes]
        if len(outcomes) == 1:
            cells += [_fmt(row["lower"], 6), _fmt(row["upper"], 6)]
        cells += ["yes" if row["ctl"]["EF unsafe"] else "no", "yes" if row["ctl"]["AG !unsafe"] else "no"]
        table.add_row(*cells)
    out.print(table)


_SHOWN_INITIAL = 20


def _json_number(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None  # JSON has no infinity: null, with "infinite"


def _print_prism(result: Any, format: Format) -> None:
    """Every initial state's value (a PRISM model may have several), states in the model's own order."""
    initial = set(result.initial_states)
    several = len(result.initial_states) > 1
    if format is Format.json:
        print_json({
            "property": result.formula,
            "initial": _json_number(result.initial),
            "initial_aggregate": f"max over {len(initial)} initial states" if several else "the initial state",
            "initial_states": [{"index": i, "variables": result.variables[i], "value": _json_number(result.values[i])}
                               for i in result.initial_states],
            "states": [{"index": i, "variables": result.variables[i], "value": _json_number(v),
                        "infinite": bool(np.isinf(v)), "initial": i in initial}
                       for i, v in enumerate(result.values)]})
        return
    size = f"{result.states} states, {result.transitions} transitions"
    if not several:
        (only,) = result.initial_states
        out.print(f"{result.formula} = {result.initial:.6g} in the initial state ({size}; the initial state is "
                  f"{_words(result.variables[only])})", highlight=False, markup=False, soft_wrap=True)
        return
    values = result.initial_values
    out.print(f"{result.formula}: the model has {len(values)} initial states, each with its own value: "
              f"min {min(values):.6g}, max {max(values):.6g} (QComp reports the max) ({size})",
              highlight=False, markup=False, soft_wrap=True)
    for i in result.initial_states[:_SHOWN_INITIAL]:
        out.print(f"  {_words(result.variables[i])}  {result.values[i]:.6g}", highlight=False, markup=False, soft_wrap=True)
    if len(values) > _SHOWN_INITIAL:
        out.print(f"  … and {len(values) - _SHOWN_INITIAL} more (--format json lists them all)",
                  highlight=False, markup=False, soft_wrap=True)


def _words(variables: dict[str, Any]) -> str:
    return "[" + ", ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in variables.items()) + "]"


@app.command()
def export(
    model: Annotated[Path, typer.Argument(help="A Forewarn model file.")],
    format: Annotated[ExportFormat, typer.Option("--format", help="prism or drn.")] = ExportFormat.prism,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="File to write (default: stdout).")]
    = None,
) -> None:
    """Export the learned chain with its labels (unsafe, end, predicates) as PRISM or DRN."""
    loaded = GuardModel.load(model)
    if output is not None:
        try:  # like `learn -o`: create the folder; a path that cannot be written is a user error
            output.parent.mkdir(parents=True, exist_ok=True)
            if format is ExportFormat.prism:
                output.write_text(prism_text(loaded.dtmc, name=loaded.spec.name), encoding="utf-8")
                return
        except OSError as exc:
            raise ForewarnError(f"{output}: cannot write: {exc.strerror}") from exc
    if format is ExportFormat.prism:
        sys.stdout.write(prism_text(loaded.dtmc, name=loaded.spec.name))
        return
    if output is None:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "model.drn"
            export_drn(loaded.dtmc, path)
            sys.stdout.write(path.read_text(encoding="utf-8"))
        return
    export_drn(loaded.dtmc, output)


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


@app.command()
def demo(
    domain: Annotated[str, typer.Option(help="Built-in domain.")] = "embodied",
    out_dir: Annotated[Path, typer.Option("--out", help="Where traces, specs and models go.")]
    = Path("forewarn-demo"),
    runs: Annotated[int, typer.Option(help="Logged runs per task to learn from.")] = 150,
    episodes: Annotated[int, typer.Option(help="Simulated episodes per task and configuration.")] = 40,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 7,
    heed: Annotated[Optional[float], typer.Option(help="Probability the agent heeds a reflection prompt.")]
    = None,
) -> None:
    """Run the whole pipeline on a built-in domain and print a Table-3-style comparison."""
    from guard.demo import run_demo

    run_demo(domain=domain, out_dir=out_dir, runs=runs, episodes=episodes, seed=seed, heed=heed, console=out)


def _register_plugins() -> None:
    """Commands that live with their subsystems (imported lazily: heavy back-ends load on use)."""
    from guard.evaluation.cli import register as register_evaluation
    from guard.llmcheck.cli import register as register_llmcheck
    from server.cli import register as register_server

    register_evaluation(app)
    register_server(app)
    register_llmcheck(app)


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
    from guard._cli import stdout_for_python_only

    command = typer.main.get_command(app)
    _tidy_help(command)
    try:
        with stdout_for_python_only():
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
