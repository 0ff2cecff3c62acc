"""``forewarn learn``: traces to a checked model file (or a bundle), and the summary it prints."""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from ...errors import ConfigError, ForewarnError, InputError, UsageError
from ..bundle import DEFAULT_MIN_GROUP_RUNS, GuardBundle, group_path
from ..model import GuardModel
from ..output_files import check_output
from ..read_summary import IngestSummary
from ..results import Method
from ..trust import RETIRED_ALLOW_LIST
from ._model_text import enough_runs_line, fmt, pac_lines, pac_words, thin_line
from ._options import (
    Engine,
    Format,
    MkdirOption,
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
from ._progress import progress
from ._replay_options import (
    ExtractorOption,
    InputFormatOption,
    OnErrorOption,
    OnMismatchOption,
    error_policy,
    mismatch_policy,
)

if TYPE_CHECKING:
    from ..traces import Run

__all__ = ["Engine"]  # names other modules import through this one


def learn(
    traces: Annotated[list[str], typer.Argument(
        help="Trace files: JSONL (one run a line), folders of part files, globs, Parquet (the parquet extra; "
             "Spark reads it alone); with --engine spark also any Hadoop URI (s3a://, hdfs://).")],
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
    on_error: OnErrorOption = None,
    input_format: InputFormatOption = "auto",
    extractor: ExtractorOption = None,
    on_mismatch: OnMismatchOption = None,
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
        "--allow-python", hidden=True, help="Retired: register predicates instead (docs/spec.md).")] = None,
    engine: Annotated[Engine, typer.Option(help="Count in this process, or on Apache Spark (needs the "
                                                "'spark' extra and Java; docs/scale.md).")] = Engine.local,
    master: Annotated[str | None, typer.Option(help="Spark master for --engine spark: local[*], "
                                                       "spark://HOST:PORT, yarn (default: the running "
                                                       "session's, else local[*]).")] = None,
    mkdir: MkdirOption = False,
    mdp: Annotated[bool, typer.Option(
        "--mdp", help="Learn the MDP over action classes beside the chain (docs/shield.md; as learning.mdp: "
                      "true in the spec).")] = False,
    verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Print every figure of a single model: the summary table and every PAC bound "
                                "(--format json always has them all).")] = False,
    discover: Annotated[bool | None, typer.Option(
        "--discover/--no-discover", help="First extend the spec with the predicates and action memory discovery "
                                         "finds in these runs, and learn with that (default: the spec's "
                                         "`discover: auto|off`); too few or one-sided runs leave it unchanged, "
                                         "with a line saying why.")] = None,
) -> None:
    """Learn a DTMC from traces, check it with Storm for every state, and write the model file."""
    from ..signing import load_private_key
    from ..spec import load_spec

    if allow_python:
        raise ConfigError(RETIRED_ALLOW_LIST)
    if master is not None and engine is not Engine.spark:
        raise UsageError("--master applies to --engine spark only")
    check_alpha(alpha)
    check_precision(precision)
    check_probability(epsilon, "--epsilon")
    check_probability(delta, "--delta")
    check_period(period)
    check_output(output, inputs=[*traces, spec], mkdir=mkdir)
    signing_key = load_private_key(sign) if sign is not None else None  # a bad key fails before learning
    if group_by is not None:
        group_path(group_by)  # a bad path fails before any run is read
    logs = input_format not in ("auto", "jsonl")  # read through the input format's reader, not the contract's
    if engine is Engine.spark and logs:
        raise InputError(f"--engine spark reads JSONL and Parquet runs, not --input-format {input_format}")
    if engine is Engine.local and not logs:
        _contract_only(traces)
    parsed = load_spec(spec)
    from ..discovery.auto import wanted

    discovering = wanted(parsed, discover)
    remote = [t for t in traces if "://" in t]
    if discovering and engine is Engine.spark and remote:
        # discovery reads every run in this process: a Hadoop URI is Spark's to read
        if discover:
            raise UsageError(f"--discover reads the runs in this process, and {remote[0]} is for Spark to read: run "
                             "`forewarn discover` on a local copy first and learn the spec it writes")
        warn(f"the spec's discover: auto is not run on {remote[0]} (Spark's to read): learning with the spec as "
             "written (run `forewarn discover` on a local copy first)")
        discovering = False
    said = None
    if discovering and engine is Engine.spark:  # discovery here from the local files, the counting on Spark
        from ..ingest import read_input

        parsed, said = _discovered(list(read_input([Path(t) for t in traces], "jsonl", period=period,
                                                   on_error=error_policy(on_error) or "stop")), parsed, group_by)
    read = IngestSummary()
    options = dict(alpha=alpha, method=method, precision=precision, epsilon=epsilon, delta=delta, period=period,
                   on_error=error_policy(on_error) or "stop", summary=read)
    if mdp or parsed.learning.mdp:
        if group_by is not None or engine is Engine.spark:
            raise UsageError("an MDP (--mdp, learning.mdp) is learned for a single model in this process: "
                             "not with --group-by or --engine spark")
        options["mdp"] = True
    if engine is Engine.spark:
        learned = _learn_on_spark(traces, parsed, master, group_by, min_group_runs, options)
    elif logs or discovering:
        from ..ingest import get_format, read_input

        reader = input_format if logs else "jsonl"
        policy = error_policy(on_error) or get_format(reader).defaults.on_error
        runs: Iterable[Run] = read_input([Path(t) for t in traces], reader, period=period, summary=read,
                                         extractor=extractor, on_error=policy,
                                         on_mismatch=mismatch_policy(on_mismatch))
        if discovering:
            runs = list(runs)
            parsed, said = _discovered(runs, parsed, group_by)
        learned = _learn_here([Path(t) for t in traces], parsed, group_by, min_group_runs,
                              {**options, "on_error": policy}, logs=runs)
    else:
        learned = _learn_here([Path(t) for t in traces], parsed, group_by, min_group_runs, options)
    if said is not None:  # the model file says what discovery did to the spec it carries
        for model in [learned.pooled, *learned.members.values()] if isinstance(learned, GuardBundle) else [learned]:
            model.provenance["discovery"] = said
    _write_learned(learned, output, format, signing_key, read, verbose)


def _discovered(runs: list[Run], spec: Any, group_by: str | None) -> tuple[Any, str]:
    """The spec extended with what discovery finds in ``runs`` (grouped as the bundle is, when one is learned),
    and the line saying what it did (printed on stderr)."""
    from ..discovery.auto import discover_for_learning

    with progress("discovering") as update:
        result = discover_for_learning(runs, spec, group_by=group_by,
                                       on_progress=lambda text: update(description=text, completed=0, total=None),
                                       on_count=lambda done, total: update(completed=done, total=total))
    err.print(result.line(), highlight=False, markup=False, soft_wrap=True)
    return result.spec, result.line()


def _learn_on_spark(traces: list[str], spec: Any, master: str | None, group_by: str | None, min_group_runs: int,
                    options: dict[str, Any]) -> GuardModel | GuardBundle:
    from ..spark import learn_bundle_spark, learn_model_spark, spark_session

    with progress("learning on Spark"):  # one job counts the runs: off a terminal, a line now and then says so
        session = spark_session(master)
        if group_by is not None:
            return learn_bundle_spark(traces, spec, group_by=group_by, min_group_runs=min_group_runs,
                                      spark=session, **options)
        return learn_model_spark(traces, spec, spark=session, **options)


def _learn_here(traces: list[Path], parsed: Any, group_by: str | None, min_group_runs: int,
                options: dict[str, Any], logs: Iterable[Run] | None = None) -> GuardModel | GuardBundle:
    """Learn in this process from the contract's files, or from ``logs``: the runs an input format's reader
    makes of ``traces`` (``--input-format``), already counted in ``options["summary"]``."""
    with progress("learning", unit="runs") as update:
        def on_run(n: int) -> None:
            update(completed=n)

        if logs is not None:
            return _learn_logs(traces, logs, parsed, group_by, min_group_runs, on_run, options)
        if group_by is not None:
            from ..bundle import learn_bundle

            learned: GuardModel | GuardBundle = learn_bundle(traces, parsed, group_by=group_by,
                                                             min_group_runs=min_group_runs, on_run=on_run, **options)
        else:
            from ..pipeline import learn_model

            learned = learn_model(traces, parsed, on_run=on_run, **options)
    return learned


def _learn_logs(traces: list[Path], logs: Iterable[Run], parsed: Any, group_by: str | None, min_group_runs: int,
                on_run: Callable[[int], None], options: dict[str, Any]) -> GuardModel | GuardBundle:
    """A model (or bundle) from runs an input format read, with the files' digests in its provenance, as
    learning from the contract's files records them (so `replay` knows these files were learned from)."""
    from ..bundle import learn_bundle_from_runs
    from ..pipeline import learn_model_from_runs, learnable_runs
    from ..trace_files import list_trace_files
    from ..traces import file_digest

    inputs = [{"path": f.name, "sha256": file_digest(f.path), "bytes": f.size} for f in list_trace_files(traces)]
    settings = {k: v for k, v in options.items() if k not in ("period", "on_error", "summary")}
    runs = learnable_runs(logs, parsed, summary=options["summary"]) if options["on_error"] == "skip" else logs
    learned: GuardModel | GuardBundle
    runs = _some_kept(runs, options["summary"])
    if group_by is not None:
        learned = learn_bundle_from_runs(runs, parsed, group_by=group_by, min_group_runs=min_group_runs,
                                         inputs=inputs, on_run=on_run, **settings)
        models = [learned.pooled, *learned.members.values()]
        if options["period"] is not None:
            learned.provenance["period_seconds"] = options["period"]
    else:
        learned = learn_model_from_runs(runs, parsed, inputs=inputs, on_run=on_run, **settings)
        models = [learned]
    if options["period"] is not None:
        for model in models:
            model.provenance["period_seconds"] = options["period"]
    return learned


def _some_kept(runs: Iterable[Run], summary: IngestSummary) -> Iterator[Run]:
    """The runs, and at their end, when every one was skipped, an error giving the reasons (learning would
    otherwise say only that the input is empty)."""
    yield from runs
    if summary.runs == 0 and summary.skipped:
        reasons = "; ".join(line.strip() for line in summary.lines("read")[1:] if line.lstrip().startswith("skipped"))
        raise InputError(f"no runs to learn from: every run read was skipped ({reasons})")


def _write_learned(learned: GuardModel | GuardBundle, output: Path, format: Format, signing_key: Any,
                   read: IngestSummary, verbose: bool = False) -> None:
    try:
        learned.save(output, sign_with=signing_key)
    except OSError as exc:  # e.g. -o names a folder, or a path under a file
        raise InputError(f"{output}: cannot write the model file: {exc.strerror}") from exc
    if format is Format.table or read.skipped or read.mismatches or read.empty:  # JSON carries it under "read"
        print_summary(read, "learned from")
    for message in _degenerate(learned.pooled if isinstance(learned, GuardBundle) else learned):
        warn(message)
    if isinstance(learned, GuardBundle):
        _print_bundle_summary(learned, output, format)
        return
    model = learned
    if model.spec.guard.member_thresholds is not None:
        warn(f"guard.member_thresholds apply to a bundle (learn with --group-by "
             f"{model.spec.guard.member_thresholds.by}); this single model decides under guard.thresholds")
    summary = _summary(model, output)
    if model.spec.learning.kinds != 1:  # learning.kinds: how many kinds were kept, and their weights
        kinds = model.kinds
        summary["kinds"] = ("1 (held-out runs found no second kind)" if kinds is None else
                            f"{kinds.kinds} (weights {', '.join(f'{w:.2f}' for w in kinds.weights)})")
    summary["read"] = read.to_dict()
    from ..policy import Policy
    from ..thresholds import initial_crossings

    crossings = initial_crossings(model, Policy.from_settings(model.spec.guard))
    summary["threshold_warnings"] = crossings
    print_warnings(crossings)
    if format is Format.json:
        print_json(summary)
        return
    if verbose:
        _print_every_figure(model, summary, output)
    else:
        _print_brief(model, summary, output)


def _print_brief(model: GuardModel, summary: dict[str, Any], output: Path) -> None:
    """The few lines a person reads: what was learned, the start risk, what is thin, whether the runs are enough."""
    kinds = f", kinds: {summary['kinds']}" if "kinds" in summary else ""
    lines = [f"forewarn learn → {output}: {summary['runs']} runs ({summary['unsafe_runs']} unsafe), "
             f"{summary['steps']} steps, {summary['states']} states{kinds}",
             _start_risk(summary), thin_line(model), enough_runs_line(model),
             "Every figure (the summary table, the paper's PAC bound and the others): --verbose, or --format json."]
    for line in lines:
        if line is not None:
            out.print(line, highlight=False, markup=False, soft_wrap=True)


def _print_every_figure(model: GuardModel, summary: dict[str, Any], output: Path) -> None:
    """``--verbose``: the summary table (every JSON figure), the start risk and every PAC bound in words."""
    table = Table(title=f"forewarn learn → {output}", show_header=False)
    for key, value in summary.items():
        if key not in ("pac_worst", "initial_interval", "threshold_warnings", "read"):
            table.add_row(key, str(value))
    out.print(table)
    if summary["initial_interval"] is not None:
        out.print(_start_risk(summary), soft_wrap=True)
    for line in pac_lines(model):
        out.print(line, highlight=False)


def _start_risk(summary: dict[str, Any]) -> str:
    """The risk of a run at its start, with its interval when the model has one."""
    interval = summary["initial_interval"]
    if interval is None:
        return f"Risk at the start: {summary['initial_risk']:.1%} (no interval in this model)."
    return (f"Risk at the start: {summary['initial_risk']:.1%}, {interval['confidence']:.0%} interval "
            f"[{interval['ci_low']:.1%}, {interval['ci_high']:.1%}] ({interval['method']}, from "
            f"{interval['visits']} visits of the initial state{'s' if interval['states'] > 1 else ''})."
            + (" The interval is wide: the runs leave the risk largely open (few runs start here, or "
               "few visit the states they go on to); more runs narrow it, and guard.act_on: upper or guard.min_visits "
               "act on it (docs/method.md)." if interval["ci_high"] - interval["ci_low"] > 0.5 else ""))


def _contract_only(traces: list[str]) -> None:
    """``learn`` reads the contract's JSONL: other logs get a pointer to ``forewarn ingest``."""
    from ..ingest import InputFormat, detect_format
    from ..trace_files import list_trace_files

    for path in [f.path for f in list_trace_files(traces) if f.kind == "jsonl"]:
        try:
            kind = detect_format(path)
        except ForewarnError:
            continue  # learning will name the line at fault
        kind = getattr(kind, "value", kind)  # a format registered outside Forewarn is its name
        if kind != InputFormat.jsonl.value:
            raise InputError(f"{path}: these are {kind} logs, not the contract's JSONL; convert them first: "
                                f"forewarn ingest {path} -o traces.jsonl (or learn from them with --input-format "
                                f"{kind})")


def _degenerate(model: GuardModel) -> list[str]:
    """Warnings for a spec or data that make the model say nothing useful."""
    from ..constant_predicates import ConstantPredicate
    from ..predicates import PredicateSet

    found: list[str] = []
    try:
        predicates = PredicateSet(model.spec)
    except ForewarnError:
        return found
    if predicates.width <= 16 and all(predicates.is_unsafe(bits) for bits in range(1 << predicates.width)):
        found.append(f"'unsafe' ({model.spec.unsafe}) holds whatever the predicates are: every state is unsafe, "
                     "every risk is 1 and every decision the same")
    elif model.provenance.get("unsafe_runs") == 0:
        runs = model.provenance.get("runs")
        if model.dtmc.alpha == 0:
            found.append(f"no training run was unsafe (0 of {runs}) and alpha is 0: every risk is exactly 0; "
                         "set learning.alpha above 0 for risks and intervals that allow a rare violation")
        else:
            found.append(f"no training run was unsafe (0 of {runs}): the unsafe state is in the model, reached "
                         "only through smoothing, so the risks are small estimates of a rare event; each "
                         "interval's upper end says how rare the runs that passed show it to be")
    elif model.provenance.get("unsafe_runs") == model.provenance.get("runs"):
        found.append("every run reached an unsafe state: the model cannot tell a risky start from a safe one")
    found += [ConstantPredicate.from_dict(c).message() for c in model.provenance.get("constant_predicates", ())]
    flagged = sorted({int(i) for p in model.properties if p.mismatch is not None for i in p.mismatch.nonzero()[0]})
    if flagged:
        shown = ", ".join(f"#{i}" for i in flagged[:8]) + (", …" if len(flagged) > 8 else "")
        found.append(f"{len(flagged)} state(s) ({shown}): runs here differ by more than the state shows (the chain "
                     "and the runs' outcomes disagree, docs/method.md): their risk and interval are the runs' own; "
                     "a predicate that tells those runs apart, or learning.memory, would refine them")
    return found


def _print_bundle_summary(bundle: GuardBundle, output: Path, format: Format) -> None:
    small = sorted(g for g in bundle.group_runs if g not in bundle.members)
    from ..policy import Policy

    own = bundle.spec.guard.member_thresholds
    tuned = set() if own is None else set(own.groups)
    members = [{"group": g, **{k: v for k, v in _summary(m, output).items() if k in _MEMBER_KEYS},
                "thresholds": Policy.from_settings(bundle.spec.guard, g).thresholds.model_dump(),
                "own_thresholds": g in tuned}
               for g, m in sorted(bundle.members.items())]
    unused = sorted(tuned - set(bundle.members))
    summary: dict[str, Any] = {"bundle": str(output), "group_by": bundle.group_by, "min_group_runs": bundle.min_group_runs,
               "groups": len(bundle.group_runs), "members": len(bundle.members), "small_groups": len(small),
               "runs_without_group": bundle.runs_without_group,
               "pooled": {k: v for k, v in _summary(bundle.pooled, output).items() if k != "pac_worst"},
               "group_models": members, "groups_without_model": {g: bundle.group_runs[g] for g in small},
               "member_thresholds_unused": unused}
    if format is Format.json:
        print_json(summary)
        return
    table = Table(title=f"forewarn learn --group-by {bundle.group_by} → {output}")
    for column in ("model", "runs", "unsafe runs", "states", "initial risk", "PAC (paper; tight)"):
        table.add_column(column, justify="left" if column == "model" else "right")
    pooled = summary["pooled"]
    table.add_row("pooled", str(pooled["runs"]), str(pooled["unsafe_runs"]), str(pooled["states"]),
                  fmt(pooled["initial_risk"]), _pac_cell(pooled))
    for m in members:
        table.add_row(f"{bundle.group_by} = {m['group']}", str(m["runs"]), str(m["unsafe_runs"]), str(m["states"]),
                      fmt(m["initial_risk"]), _pac_cell(m))
    out.print(table)
    out.print(f"{len(bundle.members)} of {len(bundle.group_runs)} groups have a model of their own "
              f"(≥ {bundle.min_group_runs} runs); {len(small)} with fewer runs and "
              f"{bundle.runs_without_group} runs without {bundle.group_by} are decided by the pooled model.",
              soft_wrap=True)
    if tuned:
        out.print(f"{len(tuned & set(bundle.members))} members decide under thresholds of their own "
                  "(guard.member_thresholds); the others and the pooled model under guard.thresholds.",
                  soft_wrap=True)
    if unused:
        warn(f"guard.member_thresholds name {len(unused)} group(s) without a model of their own here "
             f"({', '.join(repr(g) for g in unused[:5])}{' …' if len(unused) > 5 else ''}): the pooled model "
             "decides for them, under guard.thresholds")


_MEMBER_KEYS = ("runs", "steps", "unsafe_runs", "states", "product_states", "initial_risk", "pac_satisfied",
                "pac_runs_factor", "pac_tight_satisfied", "pac_tight_worst_bound", "pac_tight_runs_factor",
                "pac_tight_initial_bound", "pac_tight_initial_runs_factor")


def _pac_cell(summary: dict[str, Any]) -> str:
    """A bundle member's PAC in a table cell: the paper's verdict, and the tighter bound from the start."""
    paper = "yes" if summary["pac_satisfied"] else "no"
    bound = summary.get("pac_tight_initial_bound")
    return paper if bound is None else f"{paper}; ±{bound:.3g} from the start"


def _summary(model: GuardModel, output: Path) -> dict[str, Any]:
    from ..pac import bounds  # learning's table (scipy): loaded by learning already

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
        # what discover: auto / --discover did, when it ran
        **({"discovery": model.provenance["discovery"]} if "discovery" in model.provenance else {}),
        "learn_seconds": model.provenance["learn_seconds"],
        "check_seconds": model.provenance.get("check_seconds", round(o.seconds, 6)),
        "pac_satisfied": pac.satisfied,
        "pac_amplification": pac.amplification,
        "pac_runs_factor": pac.runs_factor,
        "pac_tight_satisfied": None if pac.tight is None else pac.tight.satisfied,
        # each registered bound (docs/method.md; guard/pac/registry.py): null keys where it was not computed
        **{key: value for kind in bounds() for key, value in _bound_keys(f"pac_{kind.name}",
                                                                          pac.bounds.get(kind.name)).items()},
        "pac_worst": None if worst is None else {
            "state": worst.state, "visits": worst.visits, "required": worst.required,
            "predicates": pac_words(model, worst.state)},
    }


def _bound_keys(prefix: str, bound: Any) -> dict[str, Any]:
    """A per-state PAC bound's JSON keys (a ``TightPAC`` or None): worst and start bounds, runs factors."""
    def finite(value: float) -> float | None:
        return round(value, 6) if bound is not None and math.isfinite(value) else None
    return {
        f"{prefix}_worst_bound": None if bound is None else finite(bound.worst_bound),
        f"{prefix}_runs_factor": None if bound is None else bound.runs_factor,
        f"{prefix}_initial_bound": None if bound is None else finite(bound.initial_bound),
        f"{prefix}_initial_runs_factor": None if bound is None else bound.initial_runs_factor,
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


def register(app: typer.Typer) -> None:
    """Add ``learn`` to a typer app (``forewarn.guard.cli`` does this for ``forewarn``)."""
    app.command()(learn)
