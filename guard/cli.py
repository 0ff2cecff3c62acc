"""The ``forewarn`` command line (typer). Thin: parsing, printing, exit codes."""
from __future__ import annotations

import math
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from forewarn.guard._cli import (
    Format,
    check_alpha,
    check_period,
    check_precision,
    check_probability,
    err,
    out,
    print_json,
    print_summary,
    print_warnings,
    warn,
)
from forewarn.guard.bundle import DEFAULT_MIN_GROUP_RUNS, GuardBundle, group_path
from forewarn.guard.errors import ForewarnError, UsageError
from forewarn.guard.model import CheckedProperty, GuardModel
from forewarn.guard.read_summary import IngestSummary
from forewarn.guard.spec import PropertyDef
from forewarn.guard.storm import (
    Method,
    build_sparse_dtmc,
    check_dtmc,
    check_prism_file,
    ctl_verdicts,
    export_drn,
    labels_of,
    prism_text,
    quantitative_form,
)

if TYPE_CHECKING:
    from forewarn.domains.embodied.world import HouseholdWorld

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="Forewarn: a proactive runtime guard for LLM agents.")


class Engine(str, Enum):
    local = "local"
    spark = "spark"


class ExportFormat(str, Enum):
    prism = "prism"
    drn = "drn"


class OnError(str, Enum):
    stop = "stop"
    skip = "skip"


def _print_version(value: bool) -> None:
    if value:
        from forewarn.guard._version import __version__

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
    traces: Annotated[list[str], typer.Argument(
        help="JSONL trace files (one run a line); with --engine spark also directories, Parquet and any "
             "Hadoop URI (s3a://, hdfs://).")],
    spec: Annotated[Path, typer.Option("--spec", "-s", help="YAML spec.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Model file to write.")],
    alpha: Annotated[float | None, typer.Option(help="Laplace smoothing α (default: the spec's).")] = None,
    method: Annotated[Method, typer.Option(help="Storm method: sound (certified bounds), topological, exact.")]
    = Method.SOUND,
    precision: Annotated[float, typer.Option(help="Solver precision (sound/topological).")] = 1e-6,
    epsilon: Annotated[float | None, typer.Option(help="PAC ε (default: the spec's).")] = None,
    delta: Annotated[float | None, typer.Option(help="PAC δ (default: the spec's).")] = None,
    period: Annotated[float | None, typer.Option(help="Resample runs to one step every PERIOD seconds "
                                                         "(zero-order hold; needs 't' on every step).")] = None,
    format: Annotated[Format, typer.Option("--format", help="Summary format.")] = Format.table,
    on_error: Annotated[OnError, typer.Option(
        "--on-error", help="A malformed run stops learning, or is skipped and counted in the summary.")]
    = OnError.stop,
    group_by: Annotated[str | None, typer.Option(
        "--group-by", help="Write a bundle: one model per value of this metadata key (e.g. meta.task) "
                           "with enough runs, plus a pooled model of all runs.")] = None,
    min_group_runs: Annotated[int, typer.Option(
        "--min-group-runs", help="Runs a group needs for a model of its own (with --group-by).")]
    = DEFAULT_MIN_GROUP_RUNS,
    sign: Annotated[Path | None, typer.Option(
        "--sign", envvar="FOREWARN_SIGNING_KEY",
        help="Sign the model with this Ed25519 private key (PEM; FOREWARN_SIGNING_KEY).")] = None,
    allow_python: Annotated[list[str] | None, typer.Option(
        "--allow-python", help="A module whose functions the spec may name (python predicates, transition "
                               "rule); repeatable. Default: FOREWARN_PYTHON_PREDICATES.")] = None,
    engine: Annotated[Engine, typer.Option(help="Count in this process, or on Apache Spark (needs the "
                                                "'spark' extra and Java; docs/scale.md).")] = Engine.local,
    master: Annotated[str | None, typer.Option(help="Spark master for --engine spark: local[*], "
                                                       "spark://HOST:PORT, yarn (default: the running "
                                                       "session's, else local[*]).")] = None,
) -> None:
    """Learn a DTMC from traces, check it with Storm for every state, and write the model file."""
    from forewarn.guard.signing import load_private_key
    from forewarn.guard.spec import load_spec

    if master is not None and engine is not Engine.spark:
        raise UsageError("--master applies to --engine spark only")
    check_alpha(alpha)
    check_precision(precision)
    check_probability(epsilon, "--epsilon")
    check_probability(delta, "--delta")
    check_period(period)
    signing_key = load_private_key(sign) if sign is not None else None  # a bad key fails before learning
    if group_by is not None:
        group_path(group_by)  # a bad path fails before any run is read
    if engine is Engine.local:
        _contract_only([Path(t) for t in traces])
    parsed = load_spec(spec)
    read = IngestSummary()
    options = dict(alpha=alpha, method=method, precision=precision, epsilon=epsilon, delta=delta, period=period,
                   allow_python=allow_python, on_error=on_error.value, summary=read)
    if engine is Engine.spark:
        learned = _learn_on_spark(traces, parsed, master, group_by, min_group_runs, options)
    else:
        learned = _learn_here([Path(t) for t in traces], parsed, group_by, min_group_runs, options)
    _write_learned(learned, output, format, signing_key, read)


def _learn_on_spark(traces: list[str], spec: Any, master: str | None, group_by: str | None, min_group_runs: int,
                    options: dict[str, Any]) -> GuardModel | GuardBundle:
    from forewarn.guard.spark import learn_bundle_spark, learn_model_spark, spark_session

    session = spark_session(master)
    if group_by is not None:
        return learn_bundle_spark(traces, spec, group_by=group_by, min_group_runs=min_group_runs, spark=session,
                                  **options)
    return learn_model_spark(traces, spec, spark=session, **options)


def _learn_here(traces: list[Path], parsed: Any, group_by: str | None, min_group_runs: int,
                options: dict[str, Any]) -> GuardModel | GuardBundle:
    with Progress(TextColumn("learning"), BarColumn(), TextColumn("{task.completed} runs"), TimeElapsedColumn(),
                  console=err, transient=True, disable=not err.is_terminal) as progress:
        task = progress.add_task("learn", total=None)

        def on_run(n: int) -> None:
            progress.update(task, completed=n)

        if group_by is not None:
            from forewarn.guard.bundle import learn_bundle

            learned: GuardModel | GuardBundle = learn_bundle(traces, parsed, group_by=group_by,
                                                             min_group_runs=min_group_runs, on_run=on_run, **options)
        else:
            from forewarn.guard.pipeline import learn_model

            learned = learn_model(traces, parsed, on_run=on_run, **options)
    return learned


def _write_learned(learned: GuardModel | GuardBundle, output: Path, format: Format, signing_key: Any,
                   read: IngestSummary) -> None:
    try:
        learned.save(output, sign_with=signing_key)
    except OSError as exc:  # e.g. -o names a folder, or a path under a file
        raise ForewarnError(f"{output}: cannot write the model file: {exc.strerror}") from exc
    if format is Format.table or read.skipped or read.mismatches or read.empty:  # JSON carries it under "read"
        print_summary(read, "learned from")
    for message in _degenerate(learned.pooled if isinstance(learned, GuardBundle) else learned):
        warn(message)
    if isinstance(learned, GuardBundle):
        _print_bundle_summary(learned, output, format)
        return
    model = learned
    summary = _summary(model, output)
    summary["read"] = read.to_dict()
    from forewarn.guard.policy import Policy
    from forewarn.guard.thresholds import initial_crossings

    crossings = initial_crossings(model, Policy.from_settings(model.spec.guard))
    summary["threshold_warnings"] = crossings
    print_warnings(crossings)
    if format is Format.json:
        print_json(summary)
        return
    table = Table(title=f"forewarn learn → {output}", show_header=False)
    for key, value in summary.items():
        if key not in ("pac_worst", "initial_interval", "threshold_warnings", "read"):
            table.add_row(key, str(value))
    out.print(table)
    interval = summary["initial_interval"]
    if interval is not None:
        out.print(f"Risk at the start: {summary['initial_risk']:.1%}, {interval['confidence']:.0%} interval "
                  f"[{interval['ci_low']:.1%}, {interval['ci_high']:.1%}] ({interval['method']}, from "
                  f"{interval['visits']} visits of the initial state{'s' if interval['states'] > 1 else ''})."
                  + (" The interval is wide: the runs leave the risk largely open (few runs start here, or "
                     "few visit the states they go on to); more runs narrow it, and guard.act_on: upper or guard.min_visits "
                     "act on it (docs/method.md)." if interval["ci_high"] - interval["ci_low"] > 0.5 else ""),
                  soft_wrap=True)
    for line in _pac_lines(model):
        out.print(line, highlight=False)


def _pac_lines(model: GuardModel) -> list[str]:
    """The PAC report in words: the paper's bound, then the tighter one (guard/pac.py)."""
    pac, runs = model.pac, model.provenance.get("runs")
    worst = pac.worst
    if worst is None:
        return []
    lines = [f"PAC (ε={pac.epsilon}, δ={pac.delta}), the paper's bound: {pac.satisfied_count}/{len(pac.states)} "
             f"states have enough visits; worst state {worst.state} ({_pac_words(model, worst.state)}) has "
             f"{worst.visits} of {worst.required if worst.required is not None else '∞'} required"
             + ("" if pac.runs_factor is None or pac.satisfied else f" ({_more_runs(pac.runs_factor, runs)})") + "."]
    tight = pac.tight
    if tight is None:
        return lines + ["PAC, tighter bound: not in this model file (written by an older Forewarn); re-learn."]
    confidence = f"{1 - pac.delta:.0%}"

    def verdict(bound: float, factor: float | None, limiting: list[int]) -> str:
        if bound <= pac.epsilon:
            return f"±{bound:.3g}: met (ε = {pac.epsilon})"
        if factor is None:
            return f"±{bound:.3g}; no forecast of the runs that would meet ε = {pac.epsilon}"
        through = ", ".join(f"{i} ({_pac_words(model, i)}, {_visits(model, i)} visits)" for i in limiting[:3])
        return f"±{bound:.3g}; ε = {pac.epsilon} needs {_more_runs(factor, runs)}" + \
            (f", most of all through state {through}" if through else "")

    return lines + [
        f"PAC, tighter bound ({confidence} confidence): a run's risk from its first state (the paper's "
        f"Definition 4) {verdict(tight.initial_bound, tight.initial_runs_factor, tight.initial_limiting)}.",
        f"PAC, tighter bound ({confidence} confidence): every state's risk "
        f"{verdict(tight.worst_bound, tight.runs_factor, tight.limiting)}."]


def _more_runs(factor: float, runs: Any) -> str:
    times = f"{factor:,.0f}" if factor >= 100 else f"{factor:.3g}"
    if isinstance(runs, int) and runs > 0:
        return f"about {times}× the runs, {math.ceil(factor * runs):,} instead of {runs:,}"
    return f"about {times}× the runs"


def _visits(model: GuardModel, state: int) -> int:
    return next((s.visits for s in model.pac.states if s.state == state), 0)


def _pac_document(model: GuardModel) -> dict[str, Any]:
    """The PAC report for JSON output (``check``): both bounds, the paper's labelled as such."""
    pac, runs = model.pac, model.provenance.get("runs")
    tight = pac.tight

    def needed(factor: float | None) -> int | None:
        return math.ceil(factor * runs) if factor is not None and isinstance(runs, int) else None

    return {
        "epsilon": pac.epsilon, "delta": pac.delta, "runs": runs,
        "paper": {"satisfied": pac.satisfied, "states_satisfied": pac.satisfied_count, "states": len(pac.states),
                  "amplification": pac.amplification if math.isfinite(pac.amplification) else None,
                  "runs_factor": pac.runs_factor, "runs_needed": needed(pac.runs_factor)},
        "tight": None if tight is None else {
            "satisfied": tight.satisfied,
            "worst_bound": tight.worst_bound if math.isfinite(tight.worst_bound) else None,
            "runs_factor": tight.runs_factor, "runs_needed": needed(tight.runs_factor),
            "limiting": [{"state": i, "predicates": _pac_words(model, i), "visits": _visits(model, i),
                          "required": next((s.required for s in tight.states if s.state == i), None)}
                         for i in tight.limiting],
            "initial": {"satisfied": tight.initial_satisfied,
                        "bound": tight.initial_bound if math.isfinite(tight.initial_bound) else None,
                        "runs_factor": tight.initial_runs_factor, "runs_needed": needed(tight.initial_runs_factor),
                        "limiting": [{"state": i, "predicates": _pac_words(model, i), "visits": _visits(model, i)}
                                     for i in tight.initial_limiting]}},
    }


def _contract_only(traces: list[Path]) -> None:
    """``learn`` reads the contract's JSONL: other logs get a pointer to ``forewarn ingest``."""
    from forewarn.guard.ingest import InputFormat, detect_format

    for path in traces:
        try:
            kind = detect_format(path)
        except ForewarnError:
            continue  # learning will name the line at fault
        if kind is not InputFormat.jsonl:
            raise ForewarnError(f"{path}: these are {kind.value} logs, not the contract's JSONL; convert them first: "
                                f"forewarn ingest {path} -o traces.jsonl")


def _degenerate(model: GuardModel) -> list[str]:
    """Warnings for a spec or data that make the model say nothing useful."""
    from forewarn.guard.predicates import PredicateSet

    found: list[str] = []
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


def _print_bundle_summary(bundle: GuardBundle, output: Path, format: Format) -> None:
    small = sorted(g for g in bundle.group_runs if g not in bundle.members)
    members = [{"group": g, **{k: v for k, v in _summary(m, output).items() if k in _MEMBER_KEYS}}
               for g, m in sorted(bundle.members.items())]
    summary: dict[str, Any] = {"bundle": str(output), "group_by": bundle.group_by, "min_group_runs": bundle.min_group_runs,
               "groups": len(bundle.group_runs), "members": len(bundle.members), "small_groups": len(small),
               "runs_without_group": bundle.runs_without_group,
               "pooled": {k: v for k, v in _summary(bundle.pooled, output).items() if k != "pac_worst"},
               "group_models": members, "groups_without_model": {g: bundle.group_runs[g] for g in small}}
    if format is Format.json:
        print_json(summary)
        return
    table = Table(title=f"forewarn learn --group-by {bundle.group_by} → {output}")
    for column in ("model", "runs", "unsafe runs", "states", "initial risk", "PAC (paper; tight)"):
        table.add_column(column, justify="left" if column == "model" else "right")
    pooled = summary["pooled"]
    table.add_row("pooled", str(pooled["runs"]), str(pooled["unsafe_runs"]), str(pooled["states"]),
                  _fmt(pooled["initial_risk"]), _pac_cell(pooled))
    for m in members:
        table.add_row(f"{bundle.group_by} = {m['group']}", str(m["runs"]), str(m["unsafe_runs"]), str(m["states"]),
                      _fmt(m["initial_risk"]), _pac_cell(m))
    out.print(table)
    out.print(f"{len(bundle.members)} of {len(bundle.group_runs)} groups have a model of their own "
              f"(≥ {bundle.min_group_runs} runs); {len(small)} with fewer runs and "
              f"{bundle.runs_without_group} runs without {bundle.group_by} are decided by the pooled model.",
              soft_wrap=True)


_MEMBER_KEYS = ("runs", "steps", "unsafe_runs", "states", "product_states", "initial_risk", "pac_satisfied",
                "pac_runs_factor", "pac_tight_satisfied", "pac_tight_worst_bound", "pac_tight_runs_factor",
                "pac_tight_initial_bound", "pac_tight_initial_runs_factor")


def _pac_cell(summary: dict[str, Any]) -> str:
    """A bundle member's PAC in a table cell: the paper's verdict, and the tighter bound from the start."""
    paper = "yes" if summary["pac_satisfied"] else "no"
    bound = summary.get("pac_tight_initial_bound")
    return paper if bound is None else f"{paper}; ±{bound:.3g} from the start"


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
        "initial_interval": _initial_interval(model),
        "learn_seconds": model.provenance["learn_seconds"],
        "check_seconds": model.provenance.get("check_seconds", round(o.seconds, 6)),
        "pac_satisfied": pac.satisfied,
        "pac_amplification": pac.amplification,
        "pac_runs_factor": pac.runs_factor,
        "pac_tight_satisfied": None if pac.tight is None else pac.tight.satisfied,
        "pac_tight_worst_bound": None if pac.tight is None or not math.isfinite(pac.tight.worst_bound)
        else round(pac.tight.worst_bound, 6),
        "pac_tight_runs_factor": None if pac.tight is None else pac.tight.runs_factor,
        "pac_tight_initial_bound": None if pac.tight is None or not math.isfinite(pac.tight.initial_bound)
        else round(pac.tight.initial_bound, 6),
        "pac_tight_initial_runs_factor": None if pac.tight is None else pac.tight.initial_runs_factor,
        "pac_worst": None if worst is None else {
            "state": worst.state, "visits": worst.visits, "required": worst.required,
            "predicates": _pac_words(model, worst.state)},
    }


def _initial_interval(model: GuardModel) -> dict[str, Any] | None:
    """The first property's confidence interval at the initial states (in the terms of ``initial_risk``).

    With several initial states, the run-weighted mean of their lower and upper ends:
    the range a run's starting risk lies in (each end a mixture of valid ends).
    """
    first, d = model.properties[0], model.dtmc
    if first.ci_low is None or first.ci_high is None or model.intervals is None:
        return None
    runs = sum(d.initial.values()) or 1
    low = sum(first.ci_low[i] * n for i, n in d.initial.items()) / runs
    high = sum(first.ci_high[i] * n for i, n in d.initial.items()) / runs
    return {"ci_low": round(float(low), 6), "ci_high": round(float(high), 6),
            "confidence": 1.0 - model.intervals.delta, "method": model.intervals.construction,
            "visits": int(sum(model.visits[i] for i in d.initial)), "states": len(d.initial)}


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
    property: Annotated[str | None, typer.Option("--property", "-p", help="PCTL property, e.g. 'P=? [F<=5 \"unsafe\"]'.")]
    = None,
    const: Annotated[str | None, typer.Option("--const", help="PRISM constants, e.g. N=16,K=2.")] = None,
    method: Annotated[Method, typer.Option(help="Storm method.")] = Method.SOUND,
    precision: Annotated[float, typer.Option(help="Solver precision.")] = 1e-6,
    format: Annotated[Format, typer.Option("--format")] = Format.table,
    group: Annotated[str | None, typer.Option(
        "--group", help="For a bundle: only this member (a group's value, or 'pooled'); default: every member.")]
    = None,
    trusted_key: Annotated[list[Path] | None, typer.Option(
        "--trusted-key", help="Require the model to be signed by this Ed25519 public key (PEM); repeatable. "
                              "Default: FOREWARN_TRUSTED_KEYS.")] = None,
) -> None:
    """Show the cached per-state values of a model (of each member of a bundle), or check another property."""
    check_precision(precision)
    if model.suffix in {".pm", ".prism"}:
        if property is None:
            raise UsageError("checking a PRISM file needs --property, e.g. --property 'P=? [F \"goal\"]'")
        result = check_prism_file(model, property, constants=const, method=method, precision=precision)
        _print_prism(result, format)
        return
    if const is not None:
        raise UsageError("--const applies to PRISM files only")
    from forewarn.guard.bundle import load_model_or_bundle
    from forewarn.guard.signing import load_trusted_keys

    keys = load_trusted_keys(trusted_key) if trusted_key else None
    members = _members(load_model_or_bundle(model, trusted_keys=keys), group)
    checked = {name: _check_rows(m, property, method, precision) for name, m in members.items()}
    if format is Format.json:
        documents = {name: {"property": outcomes[0][1].formula, "method": outcomes[0][1].method.value,
                            "properties": [{"name": n, "formula": o.formula} for n, o in outcomes],
                            "intervals": None if (intervals := members[name].intervals) is None
                            else intervals.to_document(),
                            "pac": _pac_document(members[name]), "states": rows}
                     for name, (outcomes, rows) in checked.items()}
        print_json(documents[None] if None in documents else {"bundle": str(model), "members": documents})
        return
    for name, (outcomes, rows) in checked.items():
        _print_check(members[name], outcomes, rows, name)


def _check_rows(loaded: GuardModel, property: str | None, method: Method, precision: float
                ) -> tuple[list[tuple[str, Any]], list[dict[str, Any]]]:
    """The checked properties of one model, and its states as ``check --format json`` lists them."""
    dtmc = loaded.dtmc
    if property is not None:
        # check_dtmc builds a rational model for --method exact (a float model is not exact)
        query = check_dtmc(dtmc, property, method=method, precision=precision)
        checked = [CheckedProperty(PropertyDef(name="query", formula="true"), query)]
        # a bound (P>0.4 [...]): the interval is that of the probability it compares
        numbers = property if query.verdicts is None else quantitative_form(property)
        if loaded.intervals is not None and numbers is not None:  # the same interval chain, the new question
            from dataclasses import replace

            from forewarn.guard.pipeline import with_intervals

            asked, _ = with_intervals(dtmc, labels_of(dtmc), [replace(checked[0], outcome=replace(
                query, formula=numbers))], method=loaded.intervals.method, delta=loaded.intervals.delta,
                entries=loaded.intervals.entries, precision=precision)
            checked = [replace(asked[0], outcome=query)]
    else:
        checked = loaded.properties
    outcomes = [(p.name, p.outcome) for p in checked]
    ci_low, ci_high = checked[0].ci_low, checked[0].ci_high
    visits = loaded.visits
    verdicts = ctl_verdicts(build_sparse_dtmc(dtmc.matrix, labels_of(dtmc)))
    monitor_rows = dtmc.monitor_states.tolist() if dtmc.monitor_states is not None else None
    monitors: dict[str, Any] = {}
    if monitor_rows is not None:
        from forewarn.guard.monitoring import build_monitors

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
            "value": _number(first.values[i]),
            "lower": None if first.lower is None else float(first.lower[i]),
            "upper": None if first.upper is None else float(first.upper[i]),
            "ci_low": None if ci_low is None else float(ci_low[i]),
            "ci_high": None if ci_high is None else float(ci_high[i]),
            "visits": int(visits[i]),
            "ctl": {name: bool(v[i]) for name, v in verdicts.items()},
        }
        if first.verdicts is not None:  # a state formula with a bound: Storm's verdict in this state
            row["verdict"] = bool(first.verdicts[i])
        if len(outcomes) > 1:
            row["properties"] = {p.name: {"value": _number(p.outcome.values[i]),
                                          "lower": None if p.outcome.lower is None else float(p.outcome.lower[i]),
                                          "upper": None if p.outcome.upper is None else float(p.outcome.upper[i]),
                                          "ci_low": None if p.ci_low is None else float(p.ci_low[i]),
                                          "ci_high": None if p.ci_high is None else float(p.ci_high[i])}
                                 for p in checked}
        rows.append(row)
    return outcomes, rows


def _print_check(loaded: GuardModel, outcomes: list[tuple[str, Any]], rows: list[dict[str, Any]],
                 member: str | None) -> None:
    first = outcomes[0][1]
    with_monitors = loaded.dtmc.monitor_states is not None
    with_intervals = loaded.intervals is not None and rows[0]["ci_low"] is not None
    title = "  ".join(f"{name}: {o.formula}" for name, o in outcomes) + f"  ({first.method.value})"
    table = Table(title=title if member is None else f"{member}: {title}")
    columns = ["#", "state"] + (["monitors"] if with_monitors else []) + ["unsafe"] \
        + [name for name, _ in outcomes] + (["lower", "upper"] if len(outcomes) == 1 else []) \
        + (["holds"] if first.verdicts is not None else []) \
        + ([f"{1 - loaded.intervals.delta:.0%} interval"] if with_intervals and loaded.intervals else []) \
        + ["visits", "EF unsafe", "AG !unsafe"]
    for column in columns:
        table.add_column(column, justify="left" if column in {"state", "monitors", "unsafe"} else "right",
                         min_width=5 if column == "holds" else None)  # "false" whole, however narrow
    for i, row in enumerate(rows):
        cells = [str(i), "end" if row["kind"] == "end" else _state_words(loaded, i)]
        if with_monitors:
            cells.append(", ".join(f"{k} {v}" for k, v in row["monitors"].items()))
        cells.append("yes" if row["unsafe"] else "")
        cells += [_fmt(_number(o.values[i]), 6) for _, o in outcomes]
        if len(outcomes) == 1:
            cells += [_fmt(row["lower"], 6), _fmt(row["upper"], 6)]
        if "verdict" in row:
            cells.append("true" if row["verdict"] else "false")
        if with_intervals:
            cells.append(f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]")
        cells.append(str(row["visits"]) if row["kind"] == "state" and not row["unsafe"] else "–")
        cells += ["yes" if row["ctl"]["EF unsafe"] else "no", "yes" if row["ctl"]["AG !unsafe"] else "no"]
        table.add_row(*cells)
    out.print(table)
    for line in _pac_lines(loaded):
        out.print(line, highlight=False)


def _number(value: float) -> float | None:
    """A per-state value for output; NaN (no probability: a Boolean state formula) is ``None``."""
    return None if value != value else float(value)


_SHOWN_INITIAL = 20


def _json_number(value: float) -> float | None:
    """JSON has no infinity or NaN: an infinite expected reward (``"infinite": true`` beside it) or
    no probability at all (a Boolean state formula) is null."""
    return float(value) if np.isfinite(value) else None


def _print_prism(result: Any, format: Format) -> None:
    """Every initial state's value (a PRISM model may have several) and, for a bounded formula,
    every state's verdict; states in the model's own variable order."""
    initial = set(result.initial_states)
    several = len(result.initial_states) > 1
    verdicts = result.verdicts

    def state(i: int, value: float) -> dict[str, Any]:
        entry: dict[str, Any] = {"index": i, "variables": result.variables[i], "value": _json_number(value)}
        if verdicts is not None:
            entry["verdict"] = bool(verdicts[i])
        return entry

    if format is Format.json:
        document: dict[str, Any] = {
            "property": result.formula,
            "initial": _json_number(result.initial),
            "initial_aggregate": f"max over {len(initial)} initial states" if several else "the initial state"}
        if verdicts is not None:
            document["verdict"] = result.verdict
        document["initial_states"] = [state(i, result.values[i]) for i in result.initial_states]
        document["states"] = [{**state(i, v), "infinite": bool(np.isinf(v)), "initial": i in initial}
                              for i, v in enumerate(result.values)]
        print_json(document)
        return
    size = f"{result.states} states, {result.transitions} transitions"

    def show(text: str) -> None:
        out.print(text, highlight=False, markup=False, soft_wrap=True)

    if verdicts is not None:
        held = [i for i in result.initial_states if verdicts[i]]
        value = "" if _json_number(result.initial) is None else (
            f" (probability {result.initial:.6g}" + (", the max" if several else "") + ")")
        where = "the initial state" if not several else f"{len(held)} of {len(result.initial_states)} initial states"
        show(f"{result.formula} is {'true' if result.verdict else 'false'}{value} in {where} ({size})")
        if several:
            for i in result.initial_states[:_SHOWN_INITIAL]:
                show(f"  {_words(result.variables[i])}  {'true' if verdicts[i] else 'false'}  {result.values[i]:.6g}")
    elif not several:
        (only,) = result.initial_states
        show(f"{result.formula} = {result.initial:.6g} in the initial state ({size}; the initial state is "
             f"{_words(result.variables[only])})")
        return
    else:
        values = result.initial_values
        show(f"{result.formula}: the model has {len(values)} initial states, each with its own value: "
             f"min {min(values):.6g}, max {max(values):.6g} (QComp reports the max) ({size})")
        for i in result.initial_states[:_SHOWN_INITIAL]:
            show(f"  {_words(result.variables[i])}  {result.values[i]:.6g}")
    if several and len(result.initial_states) > _SHOWN_INITIAL:
        show(f"  … and {len(result.initial_states) - _SHOWN_INITIAL} more (--format json lists them all)")


def _words(variables: dict[str, Any]) -> str:
    return "[" + ", ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in variables.items()) + "]"


class StatesFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


@app.command()
def states(
    model: Annotated[Path, typer.Argument(help="A Forewarn model file or bundle.")],
    group: Annotated[str | None, typer.Option(
        "--group", help="For a bundle: only this member (a group's value, or 'pooled'); default: every member.")]
    = None,
    format: Annotated[StatesFormat, typer.Option("--format", help="table, json or csv.")] = StatesFormat.table,
) -> None:
    """List the model's abstract states: visits, risk, the action each triggers, the most likely path to unsafe."""
    from forewarn.guard.bundle import load_model_or_bundle
    from forewarn.guard.states import state_rows

    members = _members(load_model_or_bundle(model), group)
    tables = {name: (m, state_rows(m)) for name, m in members.items()}
    bundle = not (len(members) == 1 and None in members)
    if format is StatesFormat.json:
        def one(m: GuardModel, rows: list[Any]) -> dict[str, Any]:
            return {"property": m.outcome.formula, "spec": m.spec.name,
                    "thresholds": m.spec.guard.thresholds.model_dump(),
                    "unseen_state": m.spec.guard.unseen_state.value, "states": [r.to_dict() for r in rows]}
        if not bundle:
            print_json(one(*tables[None]))
        else:
            print_json({"bundle": str(model), "members": {name: one(*t) for name, t in tables.items()}})
        return
    if format is StatesFormat.csv:
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow((["member"] if bundle else []) + ["index", "state", "monitors", "unsafe", "visits",
                        "runs_started", "p_unsafe", "lower", "upper", "ci_low", "ci_high", "action", "threshold",
                        "path", "path_probability"])
        for name, (m, rows) in tables.items():
            for r in rows:
                writer.writerow(([name] if bundle else []) + [
                    r.index, _state_words(m, r.index), "; ".join(f"{k} {v}" for k, v in r.monitors.items()),
                    str(r.unsafe).lower(), r.visits, r.runs_started, r.p_unsafe, _blank(r.lower), _blank(r.upper),
                    _blank(r.ci_low), _blank(r.ci_high), r.action, _blank(r.threshold),
                    "" if r.path is None else " ".join(map(str, r.path)), _blank(r.path_probability)])
        return
    for name, (m, rows) in tables.items():
        monitors = bool(m.dtmc.monitors)
        title = (f"{'' if name is None else f'{name}: '}{m.outcome.formula}; act when p_safe < θ: "
                 + ", ".join(f"{a.value} {t}" for a, t in m.spec.guard.thresholds.items()))
        table = Table(title=title)
        columns = ["#", "state"] + (["monitors"] if monitors else []) + ["visits", "p_unsafe", "bounds", "interval",
                                                                          "action", "most likely path to unsafe"]
        for column in columns:
            table.add_column(column, justify="right" if column in {"#", "visits", "p_unsafe"} else "left")
        for r in rows:
            cells = [str(r.index), _state_words(m, r.index) + (" (unsafe)" if r.unsafe else "")]
            if monitors:
                cells.append(", ".join(f"{k} {v}" for k, v in r.monitors.items()))
            path = "unreachable" if r.path is None else (
                "here" if len(r.path) == 1 else " → ".join(f"#{i}" for i in r.path) + f"  ({r.path_probability:.3g})")
            cells += [str(r.visits), _fmt(r.p_unsafe), _interval(r.lower, r.upper), _interval(r.ci_low, r.ci_high),
                      r.action, path]
            table.add_row(*cells)
        out.print(table)
    out.print("visits: departures observed from the state; bounds: Storm's numerical bounds; interval: the "
              "statistical interval where the model has one; path: the single most probable sequence of "
              "transitions into an unsafe state (its probability, a lower bound of p_unsafe).", soft_wrap=True)


def _members(loaded: GuardModel | GuardBundle, group: str | None) -> dict[str | None, GuardModel]:
    """The models to show: a single model (under None), a bundle's members, or the one ``--group`` names."""
    if isinstance(loaded, GuardModel):
        if group is not None:
            raise UsageError("--group applies to bundles only (this is a single model)")
        return {None: loaded}
    if group is not None:
        return {group: loaded.member(group)}
    return {name: loaded.member(name) for name in loaded.names()}


def _blank(value: float | None) -> str | float:
    return "" if value is None else value


def _interval(low: float | None, high: float | None) -> str:
    return "–" if low is None or high is None else f"[{low:.4f}, {high:.4f}]"


@app.command()
def export(
    model: Annotated[Path, typer.Argument(help="A Forewarn model file.")],
    format: Annotated[ExportFormat, typer.Option("--format", help="prism or drn.")] = ExportFormat.prism,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="File to write (default: stdout).")]
    = None,
    group: Annotated[str | None, typer.Option(
        "--group", help="For a bundle: the member to export (a group's value, or 'pooled').")] = None,
) -> None:
    """Export the learned chain with its labels (unsafe, end, predicates) as PRISM or DRN."""
    from forewarn.guard.bundle import load_model_or_bundle

    found = load_model_or_bundle(model)
    if isinstance(found, GuardBundle) and group is None:
        raise UsageError(f"{model} is a bundle: choose the member to export with --group "
                         f"({', '.join(found.names()[:6])}{', …' if len(found.names()) > 6 else ''})")
    loaded = next(iter(_members(found, group).values()))
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
    heed: Annotated[float | None, typer.Option(help="Probability the agent heeds a reflection prompt.")]
    = None,
) -> None:
    """Run the whole pipeline on a built-in domain and print a Table-3-style comparison."""
    from forewarn.domains.demo import run_demo

    run_demo(domain=domain, out_dir=out_dir, runs=runs, episodes=episodes, seed=seed, heed=heed, console=out)


def _builtin_model() -> Path:
    """What ``forewarn serve`` serves when no model is configured: the embodied demo's model."""
    from forewarn.domains.embodied.builtin import builtin_model_path

    return builtin_model_path()


def _household_world() -> HouseholdWorld:
    """Where action-only logs are replayed (``--input-format actions``, ``--extractor household``)."""
    from forewarn.domains.embodied.world import HouseholdWorld

    return HouseholdWorld()


def _register_plugins() -> None:
    """Commands that live with their subsystems (imported lazily: heavy back-ends load on use)."""
    from forewarn.guard._extras import missing, register_missing
    from forewarn.guard.evaluation.cli import register as register_evaluation
    from forewarn.guard.ingest import use_world
    from forewarn.guard.llmcheck.cli import register as register_llmcheck

    use_world(_household_world)
    register_evaluation(app)
    if missing("server"):  # the core install: `serve` is listed, and says which extra it needs
        register_missing(app, "serve", "server", "Serve the guard over HTTP (sessions, steps, approvals, models).")
    else:
        from forewarn.server.cli import register as register_server

        register_server(app, builtin=_builtin_model)
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
    from forewarn.guard._cli import stdout_for_python_only

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
