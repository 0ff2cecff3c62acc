"""The ``forewarn`` command line (typer). Thin: parsing, printing, exit codes."""
from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from guard._cli import Format, err, out, print_json
from guard.errors import ForewarnError
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

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Forewarn: a proactive runtime guard for LLM agents.")
class Engine(str, Enum):
    local = "local"
    spark = "spark"


class ExportFormat(str, Enum):
    prism = "prism"
    drn = "drn"




def _fmt(value: float | None, digits: int = 4) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


@app.command()
def learn(
    traces: Annotated[list[str], typer.Argument(
        help="JSONL trace files (one run a line); with --engine spark also directories, Parquet and any "
             "Hadoop URI (s3a://, hdfs://).")],
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
    engine: Annotated[Engine, typer.Option(help="Count in this process, or on Apache Spark (needs the "
                                                "'spark' extra and Java).")] = Engine.local,
    master: Annotated[Optional[str], typer.Option(help="Spark master for --engine spark: local[*], "
                                                       "spark://HOST:PORT, yarn (default: the running "
                                                       "session's, else local[*]).")] = None,
) -> None:
    """Learn a DTMC from traces, check it with Storm for every state, and write the model file."""
    from guard.pipeline import learn_model
    from guard.spec import load_spec

    if master is not None and engine is not Engine.spark:
        raise ForewarnError("--master applies to --engine spark only")
    parsed = load_spec(spec)
    if engine is Engine.spark:
        from guard.spark import learn_model_spark, spark_session

        model = learn_model_spark(traces, parsed, spark=spark_session(master), alpha=alpha,
                                  method=method, precision=precision, epsilon=epsilon, delta=delta, period=period)
        _write_learned(model, output, format)
        return
    with Progress(TextColumn("learning"), BarColumn(), TextColumn("{task.completed} runs"), TimeElapsedColumn(),
                  console=err, transient=True, disable=not err.is_terminal) as progress:
        task = progress.add_task("learn", total=None)
        model = learn_model([Path(t) for t in traces], parsed, alpha=alpha, method=method, precision=precision,
                            epsilon=epsilon, delta=delta, period=period,
                            on_run=lambda n: progress.update(task, completed=n))
    _write_learned(model, output, format)


def _write_learned(model: GuardModel, output: Path, format: Format) -> None:
    try:
        model.save(output)
    except OSError as exc:  # e.g. -o names a folder, or a path under a file
        raise ForewarnError(f"{output}: cannot write the model file: {exc.strerror}") from exc
    summary = _summary(model, output)
    if format is Format.json:
        print_json(summary)
        return
    table = Table(title=f"forewarn learn → {output}", show_header=False)
    for key, value in summary.items():
        if key != "pac_worst":
            table.add_row(key, str(value))
    out.print(table)
    worst = summary["pac_worst"]
    if worst:
        out.print(f"PAC (ε={model.pac.epsilon}, δ={model.pac.delta}): "
                  f"{model.pac.satisfied_count}/{len(model.pac.states)} states have enough visits; worst "
                  f"state {worst['state']} ({worst['predicates']}) has {worst['visits']} of "
                  f"{worst['required']} required.")


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
    if model.suffix in {".pm", ".prism"}:
        if property is None:
            raise ForewarnError("checking a PRISM file needs --property, e.g. --property 'P=? [F \"goal\"]'")
        result = check_prism_file(model, property, constants=const, method=method, precision=precision)
        if format is Format.json:
            print_json({"property": result.formula, "initial": result.initial,
                         "states": [{"index": i, "value": float(v)} for i, v in enumerate(result.values)]})
        else:
            out.print(f"{result.formula} = {result.initial:.6g} in the initial state "
                      f"({result.states} states, {result.transitions} transitions)")
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


def main() -> None:
    """Entry point: user errors print one clear line and exit 2, never a traceback."""
    try:
        app(standalone_mode=False)
    except ForewarnError as exc:
        # escape: messages quote user text (CEL such as `x in [a, b]`) that rich would read as markup;
        # soft_wrap: one line however long, so scripts can grep it
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, markup=True, soft_wrap=True)
        sys.exit(2)
    except (typer.Exit, SystemExit) as exc:
        code = getattr(exc, "exit_code", getattr(exc, "code", 0))
        sys.exit(code)
    except typer.Abort:
        sys.exit(130)
    except Exception as exc:  # click's usage errors; typer >= 0.2x vendors click, so no `import click`
        show, code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
        if callable(show) and isinstance(code, int):
            show()
            sys.exit(code)
        raise


if __name__ == "__main__":
    main()
