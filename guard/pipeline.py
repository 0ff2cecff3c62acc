"""learn → check → cache: the whole offline pipeline behind ``forewarn learn``."""
from __future__ import annotations

import hashlib
import platform
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CheckError, ForewarnError, InputError, TraceError
from ._version import __version__
from .backoff import learn_memory_dtmc
from .constant_predicates import constant_in_counts
from .crossval import path_transitions
from .intervals import IntervalMethod, IntervalReport, estimated_entries, transition_intervals
from .learning import (
    LearnedDTMC,
    TransitionCounts,
    ValidTransitionRule,
    count_transitions,
    learn_dtmc,
    spec_transition_rule,
)
from .markov_check import MARKOV_LEVEL, markov_test, reaching
from .mdp_learn import ChoiceCounts, learn_mdp, mdp_refusal, tap_choices
from .memory import Memory, build_memory
from .mixture_check import KindsFit, learn_kinds
from .model import CheckedProperty, GuardModel
from .monitoring import build_monitors, build_product
from .outcomes import (
    OutcomeCounts,
    assumption_free,
    chain_first_visits,
    direct_intervals,
    first_visit_counts,
    with_direct,
)
from .pac import pac_report
from .predicates import PredicateSet, PythonPredicate, registered_callable
from .read_summary import IngestSummary
from .shrinkage import CHAIN_ALONE, COUNTING, Fit, Paths, reach_targets, shrink_properties, summarize_paths
from .spec import Spec
from .storm import (
    Method,
    build_interval_dtmc,
    build_sparse_dtmc,
    check_sparse_model,
    interval_bounds,
    labels_of,
    storm_version,
    validate_formula,
)
from .trace_files import TraceFile, list_trace_files, read_trace_file, refuse_repeats
from .traces import Run, resample

__all__ = ["default_formula", "transition_rule", "learn_model", "learn_model_from_runs", "model_from_counts",
           "prepare", "with_intervals", "counting_plan", "learnable_runs"]


def default_formula(spec: Spec) -> str:
    """The first guarded property's Storm query: ``P=? [F "unsafe"]`` unless the spec says otherwise."""
    return spec.guard.effective_properties()[0].query


_LABEL = re.compile(r'"([^"]*)"')


def check_property_labels(spec: Spec, labels: Iterable[str]) -> None:
    """Every quoted label in a guarded property must exist in the model (else a SpecError on its line)."""
    known = set(labels)
    settings = spec.guard
    for index, prop in enumerate(settings.effective_properties()):
        unknown = sorted(set(_LABEL.findall(prop.formula)) - known)
        if unknown:
            loc = ("guard", "properties", index, "formula") if settings.properties else ("guard", "property")
            raise spec.error(f"property {prop.name!r} ({prop.formula}) names unknown label(s) {unknown}; "
                             f"the model has {sorted(known)}", *loc)


def transition_rule(spec: Spec, predicates: PredicateSet,
                    extra: ValidTransitionRule | None = None) -> ValidTransitionRule | None:
    """The spec's valid-transition constraints, plus a domain's rule given in code."""
    vt = spec.valid_transitions
    domain_rule = extra
    if vt.function is not None:
        try:
            # registered by operator code, as the spec's Python predicates are (guard.trust)
            domain_rule = registered_callable(vt.function, what="transition rule")
        except ValueError as exc:
            raise spec.error(f"valid_transitions.function: {exc}", "valid_transitions", "function") from exc
    if domain_rule is not None:
        domain_rule = _reported(domain_rule, vt.function or str(getattr(domain_rule, "__name__", "the transition rule")))
    irreversible = 0
    for name in vt.irreversible:
        irreversible |= 1 << predicates.names.index(name)
    return spec_transition_rule(vt.max_changed_predicates, irreversible, domain_rule, predicates.width)


def _reported(rule: ValidTransitionRule, name: str) -> ValidTransitionRule:
    """A user's transition rule whose failure is a user error naming it, not a traceback."""
    def checked(src: tuple[bool, ...], dst: tuple[bool, ...]) -> bool:
        try:
            verdict = rule(src, dst)
        except Exception as exc:  # the user's code: report it as theirs
            raise InputError(f"valid_transitions.function {name} raised {type(exc).__name__}: {exc} "
                                f"(on {list(src)} -> {list(dst)})") from exc
        return bool(verdict)

    return checked


def read_trace_files(traces: Sequence[str | Path | TraceFile], *, period: float | None = None,
                     digests: Sequence[Any] | None = None,
                     on_bad: Callable[[TraceError], None] | None = None) -> Iterable[Run]:
    """Runs from trace files, folders of part files, globs or Parquet (:mod:`guard.trace_files`),
    streamed, resampled to a fixed period (seconds) if given.

    ``digests`` (one ``hashlib`` object per file listed) are fed the bytes as they are read;
    ``on_bad`` gets each malformed line's error and reading goes on (None: raise it).
    """
    listed: list[TraceFile] = []
    for item in traces:
        listed += [item] if isinstance(item, TraceFile) else list_trace_files([item])
    refuse_repeats(listed)
    for index, file in enumerate(listed):
        for run in read_trace_file(file, digest=None if digests is None else digests[index], on_bad=on_bad):
            if period is None:
                yield run
                continue
            try:
                yield resample(run, period)
            except TraceError as exc:
                if on_bad is None:
                    raise
                on_bad(exc)


def learn_model(traces: Sequence[str | Path], spec: Spec, *, period: float | None = None,
                on_error: str = "stop", summary: Any = None, **options: Any) -> GuardModel:
    """Learn and check a model from trace files: JSONL files, folders of part files, globs, Parquet
    (streamed; see :func:`learn_model_from_runs`).

    Args:
        period: resample every run to this many seconds per step first (needs ``t``).
        on_error: ``stop`` at the first malformed run, or ``skip`` it and count it in ``summary``.
        summary: an :class:`~forewarn.guard.read_summary.IngestSummary` to fill (runs read, skipped by reason).
    """
    files = list_trace_files(traces)
    inputs = [_provenance(f) for f in files]
    digests = [hashlib.sha256() for _ in files]  # fed while learning reads: one pass over the data
    runs = runs_to_learn(files, spec, period=period, digests=digests, on_error=on_error, summary=summary,
                         python_predicates=options.get("python_predicates"))
    model = learn_model_from_runs(runs, spec, inputs=inputs, **options)
    for entry, digest in zip(inputs, digests):
        entry["sha256"] = digest.hexdigest()
    if period is not None:
        model.provenance["period_seconds"] = period
    return model


def runs_to_learn(paths: Sequence[Path | TraceFile], spec: Spec, *, period: float | None, digests: Sequence[Any],
                  on_error: str = "stop", summary: Any = None,
                  python_predicates: Mapping[str, PythonPredicate] | None = None) -> Iterable[Run]:
    """The runs of trace files for learning, counted in ``summary``; with ``on_error="skip"``
    malformed runs, and runs whose states the predicates cannot read, are skipped and counted."""
    tally = summary if summary is not None else IngestSummary()
    handle = tally.handler(on_error)  # type: ignore[arg-type]
    runs = read_trace_files(paths, period=period, digests=digests, on_bad=handle if on_error == "skip" else None)
    if on_error == "skip":
        runs = _readable(runs, PredicateSet(spec, python_predicates), handle)
    return _tallied(runs, tally)


def _readable(runs: Iterable[Run], predicates: PredicateSet, handle: Callable[[ForewarnError], None]) -> Iterable[Run]:
    from .traces import abstract_run

    for run in runs:
        try:
            abstract_run(run, predicates)  # memoised: counting it again costs little
        except TraceError as exc:
            handle(exc)
            continue
        yield run


def learnable_runs(runs: Iterable[Run], spec: Spec, *, summary: Any,
                   python_predicates: Mapping[str, PythonPredicate] | None = None) -> Iterable[Run]:
    """Runs another reader read and counted in ``summary`` (``guard.ingest.read_input``), less those whose
    states the predicates cannot read: each is skipped, counted by reason and taken off the runs read — what
    :func:`runs_to_learn` does with ``on_error="skip"`` for the contract's files."""
    predicates = PredicateSet(spec, python_predicates)

    def uncounted(exc: ForewarnError) -> None:
        summary.runs -= 1
        summary.skip(exc)

    return _readable(runs, predicates, uncounted)


def _tallied(runs: Iterable[Run], summary: Any) -> Iterable[Run]:
    for run in runs:
        summary.runs += 1
        yield run


def _provenance(file: TraceFile) -> dict[str, Any]:
    return {"path": file.name, "sha256": None, "bytes": file.size}


def learn_model_from_runs(runs: Iterable[Run], spec: Spec, *, alpha: float | None = None,
                          method: Method = Method.SOUND, precision: float = 1e-6,
                          epsilon: float | None = None, delta: float | None = None,
                          valid_transition: ValidTransitionRule | None = None,
                          python_predicates: Mapping[str, PythonPredicate] | None = None,
                          inputs: list[dict[str, Any]] | None = None,
                          on_run: Callable[[int], None] | None = None, mdp: bool | None = None) -> GuardModel:
    """Count, smooth, check with Storm and package a model.

    Args:
        runs: runs in the contract's format (consumed once, streamed).
        spec: the spec; its ``learning`` block gives α, ε and δ unless overridden here.
        method: Storm's solving method; ``sound`` keeps certified bounds.
        valid_transition: a domain rule over (src, dst) valuations, in code.
        on_run: called with the number of runs read so far (progress bars).
        mdp: learn the MDP over action classes beside the chain (None: the spec's ``learning.mdp``).
    """
    learning_bounds(spec, epsilon, delta)  # refuse a bad ε or δ before reading any data
    predicates, monitors = prepare(spec, python_predicates)
    started = time.perf_counter()

    tools: set[str] = set()  # the tools the runs called: calls to others are not placed (toolcalls.placement)

    def counted(source: Iterable[Run]) -> Iterable[Run]:
        for n, run in enumerate(source, start=1):
            for step in run.steps:
                action = step.get("action")
                if isinstance(action, dict) and isinstance(action.get("tool"), str):
                    tools.add(action["tool"])
            yield run
            if on_run is not None:
                on_run(n)

    memory, paths = counting_plan(spec, predicates)
    choices = _choice_counts(spec, spec.learning.mdp if mdp is None else mdp)
    source = counted(runs) if choices is None else tap_choices(counted(runs), predicates,
                                                              spec.learning.memory.action_class, choices, memory)
    counts = count_transitions(source, predicates, paths=paths,
                               encode=None if memory is None else memory.encode_run)
    if counts.runs == 0:
        raise TraceError("no runs to learn from: the trace input is empty")
    model = model_from_counts(counts, spec, predicates, monitors, alpha=alpha, method=method, precision=precision,
                              epsilon=epsilon, delta=delta, valid_transition=valid_transition, inputs=inputs,
                              learn_seconds=time.perf_counter() - started, paths=paths)
    if choices is not None:  # the MDP beside the chain, over its states (guard/mdp_learn.py)
        mdp_started = time.perf_counter()
        model.mdp = learn_mdp(choices, model.dtmc, spec, alpha=float(spec.learning.alpha if alpha is None else alpha),
                              delta=learning_bounds(spec, epsilon, delta)[1], precision=precision,
                              monitors=monitors)
        model.provenance["mdp_seconds"] = round(time.perf_counter() - mdp_started, 6)
    if tools:
        model.provenance["tools"] = sorted(tools)
    return model


def _choice_counts(spec: Spec, wanted: bool) -> ChoiceCounts | None:
    """Where the runs' choices are counted for the MDP (None: no MDP); a spec it cannot serve is refused."""
    if not wanted:
        return None
    refusal = mdp_refusal(spec)
    if refusal is not None:
        raise spec.error(refusal, "learning", "mdp")
    return ChoiceCounts()


def counting_plan(spec: Spec, predicates: PredicateSet) -> tuple[Memory | None, Counter[tuple[int, ...]] | None]:
    """How runs are counted for this spec: the memory that encodes them (or None), and a
    collector of the distinct runs when a lever cross-validates or shrinks (or None)."""
    settings = spec.learning
    memory = build_memory(settings.memory, predicates.width)
    # intervals need the runs too: their outcomes give each reach property a direct interval
    wanted = (settings.shrink != "off" or settings.intervals != "none" or settings.kinds != 1
              or (memory is not None and settings.memory.backoff == "auto"))
    return memory, (Counter() if wanted else None)


def prepare(spec: Spec, python_predicates: Mapping[str, PythonPredicate] | None = None
            ) -> tuple[PredicateSet, list[Any]]:
    """The spec's compiled predicates and monitors, once its properties are known to parse."""
    definitions = spec.guard.effective_properties()
    for index, definition in enumerate(definitions):
        try:
            validate_formula(definition.query)
        except CheckError as exc:
            loc = ("guard", "properties", index, "formula") if spec.guard.properties else ("guard", "property")
            raise spec.error(str(exc), *loc) from exc
    return PredicateSet(spec, python_predicates), build_monitors(spec)


def learning_bounds(spec: Spec, epsilon: float | None, delta: float | None) -> tuple[float, float]:
    """ε and δ: the caller's, else the spec's; each strictly between 0 and 1 (else a one-line error)."""
    epsilon = spec.learning.epsilon if epsilon is None else epsilon
    delta = spec.learning.delta if delta is None else delta
    for name, value in (("epsilon", epsilon), ("delta", delta)):
        if not 0.0 < value < 1.0:  # the spec's are checked on parse; these came from a caller or the CLI
            raise InputError(f"learning {name} must lie strictly between 0 and 1, got {value}")
    return epsilon, delta


def model_from_counts(counts: TransitionCounts, spec: Spec, predicates: PredicateSet, monitors: Sequence[Any], *,
                      alpha: float | None = None, method: Method = Method.SOUND, precision: float = 1e-6,
                      epsilon: float | None = None, delta: float | None = None,
                      valid_transition: ValidTransitionRule | None = None,
                      inputs: list[dict[str, Any]] | None = None, learn_seconds: float = 0.0,
                      paths: Paths | None = None) -> GuardModel:
    """Smooth counted runs, take the product with the monitors, check it with Storm and package a model.

    With ``learning.memory`` the counts are over chain states (:func:`counting_plan`'s memory
    encodes runs); ``paths`` are the distinct counted runs, needed by ``backoff: auto``
    and ``shrink`` (without them those levers are skipped, and the
    model's ``provenance.levers`` says so).
    """
    definitions = spec.guard.effective_properties()
    epsilon, delta = learning_bounds(spec, epsilon, delta)
    settings = spec.learning
    alpha = settings.alpha if alpha is None else alpha
    memory = build_memory(settings.memory, predicates.width)
    if memory is not None and memory.actions:  # number the action classes the runs showed (guard/memory.py)
        memory, counts, paths = memory.compact(counts, paths)
    rule = transition_rule(spec, predicates, valid_transition)
    levers: dict[str, Any] = {}
    backoff = settings.memory.backoff
    if memory is not None and backoff == "auto" and paths is None:
        backoff = 10.0
        levers["backoff_note"] = "no runs to cross-validate on: backoff 10"
    if memory is None:
        chain = learn_dtmc(counts, predicates, alpha=float(alpha), rule=rule, structure=settings.structure)
    else:
        chain, levers["backoff"] = learn_memory_dtmc(counts, paths, predicates, memory, alpha=float(alpha),
                                                     beta=backoff, rule=rule, structure=settings.structure)
    product_started = time.perf_counter()
    dtmc = build_product(chain, monitors)
    product_seconds = time.perf_counter() - product_started
    labels = labels_of(dtmc)
    check_property_labels(spec, labels)
    exact_rows = [dtmc.exact_row(i) for i in range(dtmc.size)] if method is Method.EXACT else None
    storm_model = build_sparse_dtmc(dtmc.matrix, labels, exact_rows=exact_rows)
    properties = [CheckedProperty(d, check_sparse_model(storm_model, d.query, method=method, precision=precision))
                  for d in definitions]
    # one pass over the distinct runs gives shrinkage its visits and the intervals their first-visit outcomes
    reach, targets = reach_targets(properties, predicates, monitors)
    summaries = None if paths is None or not reach else summarize_paths(paths, predicates, monitors, targets)
    outcomes = None
    if summaries is not None:
        firsts = first_visit_counts(summaries.values(), len(reach), dtmc.product_index(), dtmc.size)
        outcomes = dict(zip(reach, firsts))
    chain_values = {i: p.outcome.values for i, p in enumerate(properties)}  # the chain's own, for the Markov test
    kinds = None
    if settings.kinds != 1:  # a mixture of kinds (guard/mixture_check.py) replaces shrinking and the chain's intervals
        if paths is None:
            levers["kinds"] = "skipped: no runs to fit kinds on"
        else:
            fitted = learn_kinds(settings.kinds, paths=paths, chain=chain, product=dtmc, predicates=predicates,
                                 monitors=monitors, properties=properties, alpha=float(alpha), method=method,
                                 precision=precision, delta=delta, intervals=IntervalMethod(settings.intervals))
            kinds = fitted if isinstance(fitted, KindsFit) else None
            levers["kinds"] = fitted.lever if isinstance(fitted, KindsFit) else fitted
    if kinds is not None:
        properties, report = kinds.properties, kinds.intervals
        if report is not None and outcomes:  # the pooled figure is a first-visit risk: the runs' interval holds it
            properties = with_direct(properties, outcomes, delta, report.method)
        if settings.shrink != "off":
            levers["shrink"] = "off: learning.kinds weighs the kinds instead"
    elif settings.shrink != "off":
        if paths is None:
            levers["shrink"] = "skipped: no runs to count outcomes on"
        else:  # before the intervals: the blended value is the point estimate they must contain
            properties, levers["shrink"] = shrink_properties(
                properties, paths, dtmc, predicates, monitors, settings.shrink,
                fit=_refit(counts, predicates, monitors, definitions, memory, float(alpha),
                           levers.get("backoff", {}).get("chosen"), rule, settings.structure, method, precision),
                summaries=summaries, baseline=COUNTING if memory is None else CHAIN_ALONE)
    if kinds is None:
        properties, report = with_intervals(dtmc, labels, properties, method=IntervalMethod(spec.learning.intervals),
                                            delta=delta, entries=estimated_entries(chain), precision=precision,
                                            outcomes=outcomes, chain_values=chain_values)
    pac = pac_report(chain, epsilon=epsilon, delta=delta,
                     first_visits=chain_first_visits(chain, predicates, monitors, paths, properties, reach, outcomes))
    width = predicates.width
    valuations = [[bool(bits >> b & 1) for b in range(width)] for bits in chain.states[:-1]] + [[False] * width]
    provenance = {
        "inputs": inputs or [],
        "runs": counts.runs,
        "steps": counts.steps,
        "unsafe_runs": counts.unsafe_runs,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "forewarn_version": __version__,
        "storm_version": storm_version(),
        "python_version": platform.python_version(),
        "learn_seconds": round(learn_seconds, 6),
        "chain_states": chain.size,
        "product_states": dtmc.size,
        "product_seconds": round(product_seconds, 6),
        "check_seconds": round(sum(p.outcome.seconds for p in properties), 6),
    }
    if levers:
        provenance["levers"] = levers
    constant = constant_in_counts(counts, predicates)  # predicates that cannot tell states apart (a warning of learn)
    if constant:
        provenance["constant_predicates"] = [c.to_dict() for c in constant]
    return GuardModel(spec, dtmc, properties, pac, provenance, pac_valuations=valuations, intervals=report,
                      kinds=None if kinds is None else kinds.mixture)


def _put(values: np.ndarray, where: np.ndarray, new: np.ndarray) -> np.ndarray:
    out = values.copy()
    out[where] = new
    return out


def _refit(counts: TransitionCounts, predicates: PredicateSet, monitors: Sequence[Any], definitions: Sequence[Any],
           memory: Memory | None, alpha: float, beta: float | None, rule: ValidTransitionRule | None, structure: str,
           method: Method, precision: float) -> Callable[[Paths], Fit]:
    """The same learning and checking from every run but some, α and β as chosen (for choosing κ)."""
    def fit(left_out: Paths) -> Fit:
        # the counts less the left-out runs': as learning them without those runs would count
        removed: Counter[tuple[int, int]] = Counter()
        starts: Counter[int] = Counter()
        for path, n in left_out.items():
            for pair, c in path_transitions(path, predicates).items():
                removed[pair] += c * n
            starts[path[0]] += n
        part = TransitionCounts(counts=counts.counts - removed, initial=counts.initial - starts)
        if memory is None:
            sub = learn_dtmc(part, predicates, alpha=alpha, rule=rule, structure=structure)
        else:
            sub, _ = learn_memory_dtmc(part, None, predicates, memory, alpha=alpha, beta=10.0 if beta is None else beta,
                                       rule=rule, structure=structure)
        product = build_product(sub, monitors)
        model = build_sparse_dtmc(product.matrix, labels_of(product))
        cv_method = Method.SOUND if method is Method.EXACT else method
        return Fit(product, [check_sparse_model(model, d.query, method=cv_method, precision=precision).values
                             for d in definitions])

    return fit


def with_intervals(dtmc: LearnedDTMC, labels: Mapping[str, Sequence[int]], properties: list[CheckedProperty], *,
                   method: IntervalMethod, delta: float, entries: int | None = None,
                   precision: float = 1e-6, outcomes: Mapping[int, OutcomeCounts] | None = None,
                   chain_values: Mapping[int, np.ndarray] | None = None
                   ) -> tuple[list[CheckedProperty], IntervalReport | None]:
    """Each property's confidence interval per state, from the interval chain around ``dtmc``.

    ``dtmc`` is what was checked: the learned chain or its product with monitors, whose
    transitions inherit their chain transition's interval; ``entries`` is the union
    bound's size, the learned chain's estimated entries (default: ``dtmc``'s own). Each
    interval is widened to contain the point value and Storm's numerical bounds: the point
    chain lies inside the intervals, so only solver precision could put it outside.

    ``outcomes``: per property index (reach properties), the runs' first-visit outcomes;
    then δ is split in halves, the chain's and a union bound over the direct intervals,
    and a state some run visited takes the direct interval, which holds its first-visit risk
    whether or not the runs are Markov (guard/outcomes.py); a state no run visited, the
    chain's. Where the Markov test (guard/markov_check.py) finds the chain and the runs disagree,
    the value becomes the runs' first-visit frequency, and an unvisited state that can reach
    a flagged one gets [0, 1] (the chain's interval there rests on the misfitting part).
    ``chain_values``: per property index, the chain's values the test compares (default: the
    properties' own; the pipeline passes them from before shrinking).
    """
    if method is IntervalMethod.NONE:
        return properties, None
    started = time.perf_counter()
    outcomes = {i: c for i, c in (outcomes or {}).items() if i < len(properties)}
    direct = sum(int((c.runs > 0).sum()) for c in outcomes.values())
    if direct == 0:  # no state any run visited: no direct interval, the chain keeps all of δ
        outcomes = {}
    chain_delta = delta / 2 if outcomes else delta
    per_outcome = delta / 2 / max(direct, 1)
    reach = sorted(outcomes)
    values = chain_values or {}
    test = markov_test(dtmc, [values.get(i, properties[i].outcome.values) for i in reach],
                       [outcomes[i] for i in reach], MARKOV_LEVEL) if outcomes else None
    flagged = {} if test is None else dict(zip(reach, test.mismatch))
    intervals = transition_intervals(dtmc, delta=chain_delta, method=method, entries=entries)
    model = build_interval_dtmc(dtmc.matrix, intervals.lower, intervals.upper, labels)
    out = []
    for i, prop in enumerate(properties):
        bounds = interval_bounds(model, prop.outcome.formula, precision=precision)
        o = prop.outcome
        chain = (np.zeros(len(o.values)), np.ones(len(o.values))) if bounds is None else bounds[:2]
        if bounds is None and i not in outcomes:  # a formula Storm cannot check on interval models (LTL)
            out.append(prop)
            continue
        direct_ci = ((np.zeros(len(o.values)), np.ones(len(o.values))) if i not in outcomes
                     else direct_intervals(outcomes[i], per_outcome, method))
        mismatch = flagged.get(i)
        if mismatch is not None and mismatch.any():  # the runs, not the chain, speak for these states
            counts = outcomes[i]
            frequency = counts.reached[mismatch] / counts.runs[mismatch]
            o = replace(o, values=_put(o.values, mismatch, frequency),
                        lower=None if o.lower is None else _put(o.lower, mismatch, frequency),
                        upper=None if o.upper is None else _put(o.upper, mismatch, frequency))
            # the chain's interval rests on the chain downstream too: wherever a flagged state can be
            # reached, the runs' interval replaces it
            suspect = reaching(dtmc.matrix, mismatch)
            chain = (_put(chain[0], suspect, direct_ci[0][suspect]), _put(chain[1], suspect, direct_ci[1][suspect]))
        contain = [o.values] + [b for b in (o.lower, o.upper) if b is not None]
        visited = outcomes[i].runs > 0 if i in outcomes else np.zeros(len(o.values), dtype=bool)
        low, high = assumption_free(chain, direct_ci, visited, contain)
        out.append(CheckedProperty(prop.definition, o, low, high, mismatch))
    report = IntervalReport(method, float(delta), intervals.delta_per_entry, intervals.entries,
                            round(time.perf_counter() - started, 6),
                            direct if outcomes else None, per_outcome if outcomes else None,
                            None if test is None else test.level, None if test is None else test.tested)
    return out, report
