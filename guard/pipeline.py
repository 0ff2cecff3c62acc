"""learn → check → cache: the whole offline pipeline behind ``forewarn learn``."""
from __future__ import annotations

import platform
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from guard._version import __version__
from guard.errors import TraceError
from guard.learning import ValidTransitionRule, count_transitions, learn_dtmc, spec_transition_rule
from guard.model import GuardModel
from guard.pac import pac_report
from guard.predicates import PredicateSet, PythonPredicate, resolve_callable
from guard.spec import Spec
from guard.storm import Method, check_dtmc, storm_version, validate_formula
from guard.traces import Run, file_digest, read_runs

__all__ = ["default_formula", "transition_rule", "learn_model", "learn_model_from_runs"]


def default_formula(spec: Spec) -> str:
    """``P=? [F "unsafe"]``, or ``P=? [F<=h "unsafe"]`` when the spec sets a horizon."""
    horizon = spec.guard.horizon
    bound = "" if horizon is None else f"<={horizon}"
    return f'P=? [F{bound} "unsafe"]'


def transition_rule(spec: Spec, predicates: PredicateSet,
                    extra: ValidTransitionRule | None = None) -> ValidTransitionRule | None:
    """The spec's valid-transition constraints, plus a domain's rule given in code."""
    vt = spec.valid_transitions
    domain_rule = extra
    if vt.function is not None:
        try:
            domain_rule = resolve_callable(vt.function)
        except ValueError as exc:
            raise spec.error(f"valid_transitions.function: {exc}", "valid_transitions", "function") from exc
    irreversible = 0
    for name in vt.irreversible:
        irreversible |= 1 << predicates.names.index(name)
    return spec_transition_rule(vt.max_changed_predicates, irreversible, domain_rule, predicates.width)


def learn_model(traces: Sequence[str | Path], spec: Spec, **options: Any) -> GuardModel:
    """Learn and check a model from JSONL trace files (streamed; see :func:`learn_model_from_runs`)."""
    paths = [Path(p) for p in traces]

    def runs() -> Iterable[Run]:
        for path in paths:
            yield from read_runs(path)

    return learn_model_from_runs(runs(), spec, inputs=[_provenance(p) for p in paths], **options)


def _provenance(path: Path) -> dict[str, Any]:
    try:
        return {"path": str(path), "sha256": file_digest(path), "bytes": path.stat().st_size}
    except OSError as exc:  # a user error (wrong path), not a crash
        raise TraceError(f"cannot read traces: {exc.strerror}", source=str(path)) from exc


def learn_model_from_runs(runs: Iterable[Run], spec: Spec, *, alpha: float | None = None,
                          method: Method = Method.SOUND, precision: float = 1e-6,
                          epsilon: float | None = None, delta: float | None = None,
                          valid_transition: ValidTransitionRule | None = None,
                          python_predicates: Mapping[str, PythonPredicate] | None = None,
                          inputs: list[dict[str, Any]] | None = None,
                          on_run: Callable[[int], None] | None = None) -> GuardModel:
    """Count, smooth, check with Storm and package a model.

    Args:
        runs: runs in the contract's format (consumed once, streamed).
        spec: the spec; its ``learning`` block gives α, ε and δ unless overridden here.
        method: Storm's solving method; ``sound`` keeps certified bounds.
        valid_transition: a domain rule over (src, dst) valuations, in code.
        on_run: called with the number of runs read so far (progress bars).
    """
    formula = default_formula(spec)
    validate_formula(formula)
    predicates = PredicateSet(spec, python_predicates)
    started = time.perf_counter()

    def counted(source: Iterable[Run]) -> Iterable[Run]:
        for n, run in enumerate(source, start=1):
            yield run
            if on_run is not None:
                on_run(n)

    counts = count_transitions(counted(runs), predicates)
    if counts.runs == 0:
        raise TraceError("no runs to learn from: the trace input is empty")
    learn_seconds = time.perf_counter() - started
    alpha = spec.learning.alpha if alpha is None else alpha
    dtmc = learn_dtmc(counts, predicates, alpha=alpha,
                      rule=transition_rule(spec, predicates, valid_transition))
    outcome = check_dtmc(dtmc, formula, method=method, precision=precision)
    pac = pac_report(dtmc, epsilon=spec.learning.epsilon if epsilon is None else epsilon,
                     delta=spec.learning.delta if delta is None else delta)
    provenance = {
        "inputs": inputs or [],
        "runs": counts.runs,
        "steps": counts.steps,
        "unsafe_runs": counts.unsafe_runs,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "forewarn_version": __version__,
        "storm_version": storm_version(),
        "python_version": platform.python_version(),
        "learn_seconds": round(learn_seconds, 6),
        "check_seconds": round(outcome.seconds, 6),
    }
    return GuardModel(spec, dtmc, outcome, pac, provenance)
